//! Wake-ups for held heartbeats (long polls, `crate::offsets::membership::consumer_heartbeat_held`): which members
//! a change of their group may give something to do.
//!
//! A held heartbeat of member M is answered early when deciding it again would answer news. A
//! change of M's group can only give M news when:
//! * the group epoch or target epoch moved, a member was removed, or the group was deleted or
//!   taken over — every held member of the group is woken;
//! * M's own record or target changed;
//! * another member released a partition of M's target (M may take it now).
//!
//! Waking only those keeps a change's cost to the members it concerns. Waking every held member
//! on every change would decide a group of N members O(N) times for each of the O(N) changes of
//! one rebalance, each decision reading the whole group.
//!
//! A wake-up that is missed costs latency, never safety: a held heartbeat is decided again at the
//! end of its hold whatever happened.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rill_proto::coordinator as pb;
use rill_rt::sync::futures::Notified;
use rill_rt::sync::Notify;

use super::assignor::TopicPartitions;
use super::group::{ConsumerGroups, Member};

/// Members with a held heartbeat, per group: what a change wakes.
type Listeners = HashMap<String, HashMap<String, Arc<Notify>>>;

/// The held heartbeats of a coordinator partition's groups. Entries exist only while a heartbeat
/// is held ([`MemberChanges`] removes its own), so the map is bounded by the heartbeats held now.
#[derive(Debug, Default)]
pub struct HeldHeartbeats {
    listeners: Arc<Mutex<Listeners>>,
}

/// What a held heartbeat of one member waits on: notified when a change of its group concerns
/// the member. Dropping the last one for a member forgets the member.
#[derive(Debug)]
pub struct MemberChanges {
    listeners: Arc<Mutex<Listeners>>,
    group_id: String,
    member_id: String,
    notify: Arc<Notify>,
}

/// Who a group change may concern, taken before it applies (it needs the records it replaces).
#[derive(Debug)]
pub(crate) struct WakePlan {
    group_id: String,
    /// Every held member of the group.
    all: bool,
    /// Members whose record or target the change writes.
    named: BTreeSet<String>,
    /// What the members the change writes owned before it (assigned or being revoked).
    owned_before: Vec<(String, BTreeSet<(String, u32)>)>,
}

fn lock(listeners: &Mutex<Listeners>) -> MutexGuard<'_, Listeners> {
    // Plain data: a panic elsewhere leaves it usable.
    listeners.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HeldHeartbeats {
    /// Listens for changes of `group_id` that concern `member_id`. A `Notified` taken from the
    /// result before reading the group sees every change applied after that read.
    pub fn listen(&self, group_id: &str, member_id: &str) -> MemberChanges {
        let mut listeners = lock(&self.listeners);
        let notify =
            listeners.entry(group_id.to_string()).or_default().entry(member_id.to_string()).or_default().clone();
        MemberChanges {
            listeners: Arc::clone(&self.listeners),
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            notify,
        }
    }

    /// Members with a heartbeat held now, in every group.
    pub fn len(&self) -> usize {
        lock(&self.listeners).values().map(HashMap::len).sum()
    }

    /// True when no heartbeat is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Who `change` may concern, from `groups` before it applies; `None` when no member of its
    /// group is held (the common case costs one lookup).
    pub(crate) fn plan(&self, groups: &ConsumerGroups, change: &pb::ConsumerGroupChange) -> Option<WakePlan> {
        if !lock(&self.listeners).contains_key(&change.group_id) {
            return None;
        }
        let before = groups.get(&change.group_id);
        let all = match (before, &change.meta) {
            (Some(g), Some(meta)) => {
                change.delete_group
                    || !change.removed_members.is_empty()
                    || meta.epoch != g.epoch
                    || meta.target_epoch != g.target_epoch
            }
            _ => true,
        };
        let named = change
            .upsert_members
            .iter()
            .map(|m| m.member_id.clone())
            .chain(change.upsert_targets.iter().map(|t| t.member_id.clone()))
            .chain(change.removed_targets.iter().cloned())
            .collect();
        let owned_before = match before {
            Some(g) if !all => change
                .upsert_members
                .iter()
                .filter_map(|m| g.members.get(&m.member_id))
                .map(|m| (m.member_id.clone(), owned(m)))
                .collect(),
            _ => Vec::new(),
        };
        Some(WakePlan { group_id: change.group_id.clone(), all, named, owned_before })
    }

    /// Wakes the held members `plan` concerns, reading `groups` after the change applied.
    pub(crate) fn wake(&self, plan: WakePlan, groups: &ConsumerGroups) {
        let listeners = lock(&self.listeners);
        let Some(members) = listeners.get(&plan.group_id) else { return };
        if plan.all {
            members.values().for_each(|n| n.notify_waiters());
            return;
        }
        let group = groups.get(&plan.group_id);
        let released: BTreeSet<(String, u32)> = plan
            .owned_before
            .into_iter()
            .flat_map(|(id, before)| {
                let after = group.and_then(|g| g.members.get(&id)).map(owned).unwrap_or_default();
                before.difference(&after).cloned().collect::<Vec<_>>()
            })
            .collect();
        for (member_id, notify) in members {
            let takes_released = !released.is_empty()
                && group.and_then(|g| g.target.get(member_id)).is_some_and(|t| intersects(t, &released));
            if plan.named.contains(member_id) || takes_released {
                notify.notify_waiters();
            }
        }
    }

    /// Wakes every held member of `group_id` (the group deleted, expired or taken over).
    pub(crate) fn wake_group(&self, group_id: &str) {
        if let Some(members) = lock(&self.listeners).get(group_id) {
            members.values().for_each(|n| n.notify_waiters());
        }
    }

    /// Wakes every held member of every group (a snapshot installed).
    pub(crate) fn wake_all(&self) {
        lock(&self.listeners).values().flat_map(HashMap::values).for_each(|n| n.notify_waiters());
    }
}

impl MemberChanges {
    /// Resolves at the next change that concerns this member (see [`HeldHeartbeats::listen`]).
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for MemberChanges {
    fn drop(&mut self) {
        let mut listeners = lock(&self.listeners);
        // Released under the lock, where every other handle is made and released: the count
        // read next is exact.
        drop(std::mem::take(&mut self.notify));
        let Some(members) = listeners.get_mut(&self.group_id) else { return };
        if members.get(&self.member_id).is_some_and(|n| Arc::strong_count(n) == 1) {
            members.remove(&self.member_id);
            if members.is_empty() {
                listeners.remove(&self.group_id);
            }
        }
    }
}

/// What `member` owns: assigned or being revoked.
fn owned(member: &Member) -> BTreeSet<(String, u32)> {
    [&member.assigned, &member.revoking]
        .into_iter()
        .flat_map(|set| set.iter().flat_map(|(topic, ps)| ps.iter().map(move |p| (topic.clone(), *p))))
        .collect()
}

fn intersects(target: &TopicPartitions, partitions: &BTreeSet<(String, u32)>) -> bool {
    target.iter().any(|(topic, ps)| ps.iter().any(|p| partitions.contains(&(topic.clone(), *p))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::group::{ConsumerGroup, MemberState};

    fn tp(topic: &str, ps: &[u32]) -> TopicPartitions {
        [(topic.to_string(), ps.iter().copied().collect())].into_iter().collect()
    }

    fn member(id: &str, epoch: i32, assigned: TopicPartitions) -> Member {
        Member { member_id: id.into(), epoch, assigned, state: MemberState::Stable, ..Default::default() }
    }

    /// Group `g` at epoch 2: `a` owns t-0 and t-1, `b` owns nothing and is to take t-1, `c`
    /// owns t-2.
    fn groups() -> ConsumerGroups {
        let mut g = ConsumerGroup { group_id: "g".into(), epoch: 2, target_epoch: 2, ..Default::default() };
        g.members.insert("a".into(), member("a", 2, tp("t", &[0, 1])));
        g.members.insert("b".into(), member("b", 2, TopicPartitions::new()));
        g.members.insert("c".into(), member("c", 2, tp("t", &[2])));
        g.target.insert("a".into(), tp("t", &[0]));
        g.target.insert("b".into(), tp("t", &[1]));
        g.target.insert("c".into(), tp("t", &[2]));
        ConsumerGroups::from_proto(&[g.to_proto()])
    }

    fn meta(groups: &ConsumerGroups, epoch: i32) -> pb::ConsumerGroupMeta {
        let mut meta = groups.get("g").map(ConsumerGroup::meta_to_proto).unwrap_or_default();
        meta.epoch = epoch;
        meta
    }

    /// Applies a change of `after` at group epoch `epoch` to `groups` as the state machine does,
    /// and answers who was woken.
    fn woken(held: &HeldHeartbeats, groups: &mut ConsumerGroups, after: Member, epoch: i32) -> Vec<&'static str> {
        let change = pb::ConsumerGroupChange {
            group_id: "g".into(),
            expect_version: groups.get("g").map_or(0, |g| g.version),
            meta: Some(meta(groups, epoch)),
            upsert_members: vec![crate::groups::group::member_to_proto(&after)],
            ..Default::default()
        };
        let plan = held.plan(groups, &change).expect("members are held");
        assert_eq!(groups.apply(&change), crate::groups::group::Applied::Changed);
        let listening: Vec<_> = ["a", "b", "c"].into_iter().map(|m| (m, held.listen("g", m))).collect();
        let notified: Vec<_> = listening.iter().map(|(m, l)| (*m, Box::pin(l.notified()))).collect();
        held.wake(plan, groups);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        notified
            .into_iter()
            .filter_map(|(m, mut n)| std::future::Future::poll(n.as_mut(), &mut cx).is_ready().then_some(m))
            .collect()
    }

    #[test]
    fn a_release_wakes_the_member_to_take_it_and_an_epoch_bump_wakes_all() {
        let held = HeldHeartbeats::default();
        let _listening: Vec<_> = ["a", "b", "c"].into_iter().map(|m| held.listen("g", m)).collect();
        let mut groups = groups();
        // `a` releases t-1, which `b` is to take; `c` is not concerned.
        assert_eq!(woken(&held, &mut groups, member("a", 2, tp("t", &[0])), 2), vec!["a", "b"]);
        // `c` changes without releasing anything: only `c`.
        let mut c = member("c", 2, tp("t", &[2]));
        c.client_id = "new".into();
        assert_eq!(woken(&held, &mut groups, c, 2), vec!["c"]);
        // The group epoch moves: everyone.
        assert_eq!(woken(&held, &mut groups, member("c", 2, tp("t", &[2])), 3), vec!["a", "b", "c"]);
    }

    #[test]
    fn listeners_go_with_the_last_held_heartbeat() {
        let held = HeldHeartbeats::default();
        let first = held.listen("g", "a");
        let second = held.listen("g", "a");
        let other = held.listen("h", "b");
        assert_eq!(held.len(), 2);
        drop(first);
        assert_eq!(held.len(), 2, "a is still held once");
        drop((second, other));
        assert!(held.is_empty());
        assert!(held
            .plan(&groups(), &pb::ConsumerGroupChange { group_id: "g".into(), ..Default::default() })
            .is_none());
    }
}
