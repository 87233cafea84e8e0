//! Reconciliation: how one member's current assignment moves toward its target (KIP-848's
//! "current assignment builder").
//!
//! The rules that keep two members from owning one partition at once:
//! * a member's epoch advances to the target epoch only after it has revoked every partition it
//!   owns outside its target (it reports its owned partitions; until they no longer include the
//!   ones to revoke it stays in [`MemberState::UnrevokedPartitions`] at its old epoch);
//! * a partition of its target is handed to it only when no other member owns it, assigned or
//!   still being revoked; until then the member waits in [`MemberState::UnreleasedPartitions`]
//!   and picks the partition up at a later heartbeat.
//!
//! In [`RebalanceMode::Eager`] a member whose epoch must advance revokes everything it owns
//! first, as classic eager rebalancing does.

use std::collections::BTreeMap;

use super::assignor::TopicPartitions;
use super::group::{contains, Member, MemberState, RebalanceMode};

/// Who owns each partition, other than the member being reconciled.
pub type Owners = BTreeMap<(String, u32), String>;

/// The member after one reconciliation step toward `target` at `target_epoch`.
///
/// `owned` is what the member reported owning in this heartbeat (`None` when it did not say):
/// partitions to revoke count as revoked only once a report leaves them out.
pub fn reconcile(
    member: &Member,
    target_epoch: i32,
    target: &TopicPartitions,
    owners: &Owners,
    owned: Option<&TopicPartitions>,
    mode: RebalanceMode,
) -> Member {
    match member.state {
        MemberState::Stable if member.epoch == target_epoch => member.clone(),
        MemberState::UnreleasedPartitions if member.epoch == target_epoch => {
            let mut next = member.clone();
            assign_free(&mut next, target, owners);
            next
        }
        MemberState::Stable | MemberState::UnreleasedPartitions => {
            next_assignment(member, &member.assigned, target_epoch, target, owners, owned, mode)
        }
        MemberState::UnrevokedPartitions => {
            if still_owns_any(owned, &member.revoking) {
                // Not revoked yet: the target may have moved meanwhile, so decide again from
                // everything it still owns (a partition that came back into its target is kept).
                let current = union(&member.assigned, &member.revoking);
                next_assignment(member, &current, target_epoch, target, owners, owned, mode)
            } else {
                // Revoked: what it was giving up is free for others now.
                next_assignment(member, &member.assigned, target_epoch, target, owners, owned, mode)
            }
        }
    }
}

/// From `current` (what the member owns), the next step: revoke what is outside the target, or —
/// once nothing is left to revoke — advance to the target epoch with the free target partitions.
fn next_assignment(
    member: &Member,
    current: &TopicPartitions,
    target_epoch: i32,
    target: &TopicPartitions,
    owners: &Owners,
    owned: Option<&TopicPartitions>,
    mode: RebalanceMode,
) -> Member {
    let (kept, revoke) = match mode {
        RebalanceMode::Eager if member.epoch != target_epoch => (TopicPartitions::new(), current.clone()),
        _ => split(current, target),
    };
    let mut next = member.clone();
    if !revoke.is_empty() && still_owns_any(owned, &revoke) {
        next.assigned = kept;
        next.revoking = revoke;
        next.state = MemberState::UnrevokedPartitions;
        return next;
    }
    next.assigned = kept;
    next.revoking = TopicPartitions::new();
    if next.epoch != target_epoch {
        next.previous_epoch = member.epoch;
        next.epoch = target_epoch;
    }
    assign_free(&mut next, target, owners);
    next
}

/// Gives `member` every partition of its target that no other member owns; its state says
/// whether it still waits for some.
fn assign_free(member: &mut Member, target: &TopicPartitions, owners: &Owners) {
    let mut waiting = false;
    for (topic, partitions) in target {
        for &p in partitions {
            if contains(&member.assigned, topic, p) {
                continue;
            }
            let double_assign = rill_rt::mutation::active(rill_rt::mutation::Mutation::DoubleAssign);
            if owners.contains_key(&(topic.clone(), p)) && !double_assign {
                waiting = true;
            } else {
                member.assigned.entry(topic.clone()).or_default().insert(p);
            }
        }
    }
    member.state = if waiting { MemberState::UnreleasedPartitions } else { MemberState::Stable };
}

/// `current` split into what stays (in `target`) and what must be revoked.
fn split(current: &TopicPartitions, target: &TopicPartitions) -> (TopicPartitions, TopicPartitions) {
    let mut kept = TopicPartitions::new();
    let mut revoke = TopicPartitions::new();
    for (topic, partitions) in current {
        for &p in partitions {
            let side = if contains(target, topic, p) { &mut kept } else { &mut revoke };
            side.entry(topic.clone()).or_default().insert(p);
        }
    }
    (kept, revoke)
}

fn union(a: &TopicPartitions, b: &TopicPartitions) -> TopicPartitions {
    let mut out = a.clone();
    for (topic, partitions) in b {
        out.entry(topic.clone()).or_default().extend(partitions.iter().copied());
    }
    out
}

/// True unless the member's report shows it owns none of `partitions` (no report: it may).
fn still_owns_any(owned: Option<&TopicPartitions>, partitions: &TopicPartitions) -> bool {
    let Some(owned) = owned else { return true };
    partitions.iter().any(|(topic, ps)| ps.iter().any(|&p| contains(owned, topic, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(list: &[(&str, &[u32])]) -> TopicPartitions {
        list.iter().map(|(t, ps)| (t.to_string(), ps.iter().copied().collect())).collect()
    }

    fn member(epoch: i32, assigned: TopicPartitions) -> Member {
        Member { member_id: "m".into(), epoch, assigned, ..Default::default() }
    }

    #[test]
    fn a_member_with_nothing_to_revoke_advances_and_takes_free_partitions() {
        let m = member(1, tp(&[("t", &[0, 1])]));
        let owners: Owners = [(("t".to_string(), 3), "other".to_string())].into();
        let next = reconcile(&m, 2, &tp(&[("t", &[0, 1, 2, 3])]), &owners, None, RebalanceMode::Cooperative);
        assert_eq!(next.epoch, 2);
        assert_eq!(next.previous_epoch, 1);
        assert_eq!(next.assigned, tp(&[("t", &[0, 1, 2])]), "3 is still owned by another member");
        assert_eq!(next.state, MemberState::UnreleasedPartitions);
        // Once the other member releases 3, the next heartbeat hands it over at the same epoch.
        let later = reconcile(&next, 2, &tp(&[("t", &[0, 1, 2, 3])]), &Owners::new(), None, RebalanceMode::Cooperative);
        assert_eq!(later.assigned, tp(&[("t", &[0, 1, 2, 3])]));
        assert_eq!((later.epoch, later.state), (2, MemberState::Stable));
    }

    #[test]
    fn revocation_comes_first_and_the_epoch_waits_for_it() {
        let m = member(1, tp(&[("t", &[0, 1, 2])]));
        let target = tp(&[("t", &[0, 1])]);
        let next = reconcile(&m, 2, &target, &Owners::new(), None, RebalanceMode::Cooperative);
        assert_eq!(next.epoch, 1, "the epoch does not advance before 2 is revoked");
        assert_eq!(next.state, MemberState::UnrevokedPartitions);
        assert_eq!(next.assigned, tp(&[("t", &[0, 1])]));
        assert_eq!(next.revoking, tp(&[("t", &[2])]));
        // A heartbeat still reporting 2 changes nothing; one without it advances the epoch.
        let owned_2 = tp(&[("t", &[0, 1, 2])]);
        assert_eq!(reconcile(&next, 2, &target, &Owners::new(), Some(&owned_2), RebalanceMode::Cooperative), next);
        assert_eq!(reconcile(&next, 2, &target, &Owners::new(), None, RebalanceMode::Cooperative), next);
        let done = reconcile(&next, 2, &target, &Owners::new(), Some(&target), RebalanceMode::Cooperative);
        assert_eq!((done.epoch, done.state), (2, MemberState::Stable));
        assert!(done.revoking.is_empty());
    }

    #[test]
    fn a_partition_back_in_the_target_while_revoking_is_kept() {
        let m = member(1, tp(&[("t", &[0, 1, 2])]));
        let next = reconcile(&m, 2, &tp(&[("t", &[0])]), &Owners::new(), None, RebalanceMode::Cooperative);
        assert_eq!(next.revoking, tp(&[("t", &[1, 2])]));
        // Target epoch 3 gives 1 back: only 2 is left to revoke.
        let again = reconcile(&next, 3, &tp(&[("t", &[0, 1])]), &Owners::new(), None, RebalanceMode::Cooperative);
        assert_eq!(again.assigned, tp(&[("t", &[0, 1])]));
        assert_eq!(again.revoking, tp(&[("t", &[2])]));
        assert_eq!(again.epoch, 1);
    }

    #[test]
    fn eager_revokes_everything_before_advancing() {
        let m = member(1, tp(&[("t", &[0, 1])]));
        let target = tp(&[("t", &[0, 1, 2])]);
        let next = reconcile(&m, 2, &target, &Owners::new(), None, RebalanceMode::Eager);
        assert_eq!(next.state, MemberState::UnrevokedPartitions);
        assert!(next.assigned.is_empty());
        assert_eq!(next.revoking, tp(&[("t", &[0, 1])]));
        let empty = TopicPartitions::new();
        let done = reconcile(&next, 2, &target, &Owners::new(), Some(&empty), RebalanceMode::Eager);
        assert_eq!((done.epoch, done.state), (2, MemberState::Stable));
        assert_eq!(done.assigned, target);
        // A member that owns nothing advances at once.
        let fresh = reconcile(&member(0, empty.clone()), 2, &target, &Owners::new(), None, RebalanceMode::Eager);
        assert_eq!(fresh.epoch, 2);
    }
}
