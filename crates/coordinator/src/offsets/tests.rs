//! The `consumer-offsets` kind's unit tests: commits, the machine's answers, snapshots, expiry.

use bytes::Bytes;
use prost::Message;
use rill_proto::coordinator as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};

use super::machine::*;
use super::state::*;
use super::*;
use crate::CoordinatorError;

fn commit(offsets: &[(&str, u32, i64)]) -> Payload {
    let c = pb::CommitOffsets {
        member_id: String::new(),
        member_epoch: -1,
        group_id: "g".into(),
        offsets: offsets
            .iter()
            .map(|(t, p, o)| pb::CommittedOffset {
                topic: t.to_string(),
                topic_id: Bytes::from_static(&[3; 16]),
                partition: *p,
                offset: *o,
                metadata: "m".into(),
                commit_time_ms: 5,
                leader_epoch: Some(4),
            })
            .collect(),
    };
    let body = pb::OffsetsCommand { command: Some(pb::offsets_command::Command::Commit(c)) }.encode_to_vec();
    Payload { units: 0, body: body.into(), proposal: 0 }
}

#[test]
fn commits_apply_and_the_snapshot_is_the_state() {
    let id = LogId::default();
    let mut m = OffsetsMachine::new();
    m.apply(&id, 0, &commit(&[("a", 0, 10), ("a", 1, 20)]));
    m.apply(&id, 0, &commit(&[("a", 0, 15)]));
    assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(15), "a later commit replaces");
    assert_eq!(m.state().committed("g", "a", 1).map(|c| c.offset), Some(20));
    assert_eq!(m.state().committed("g", "a", 1).and_then(|c| c.leader_epoch), Some(4), "the leader epoch is kept");
    assert_eq!(m.state().committed("g", "a", 2), None);
    assert_eq!(m.state().committed("h", "a", 0), None);
    assert_eq!(m.state().group("g").count(), 2);
    let snap = m.snapshot().unwrap();
    let mut back = OffsetsMachine::new();
    back.restore(&snap).unwrap();
    assert_eq!(back.state(), m.state());
    assert!(back.restore(&[0xff, 0xff]).is_err());
    // Garbage in the log changes nothing, on every replica alike.
    m.apply(&id, 0, &Payload { units: 0, body: Bytes::from_static(b"\xff\xff"), proposal: 0 });
    assert_eq!(back.state(), m.state());
}

fn command(c: pb::offsets_command::Command) -> Payload {
    Payload { units: 0, body: pb::OffsetsCommand { command: Some(c) }.encode_to_vec().into(), proposal: 0 }
}

/// Producer 7's (epoch 0) transactional commit of offset `offset` of `a`/0 for `g` by
/// `member` at `epoch` (a classic member's generation when `classic`), in transaction
/// `transaction_start`.
fn txn_commit_of(member: &str, epoch: i32, classic: bool, offset: i64, transaction_start: u64) -> Payload {
    let Ok(pb::OffsetsCommand { command: Some(pb::offsets_command::Command::Commit(mut c)) }) =
        pb::OffsetsCommand::decode(commit(&[("a", 0, offset)]).body)
    else {
        unreachable!("commit() builds a commit")
    };
    c.member_id = member.into();
    c.member_epoch = epoch;
    command(pb::offsets_command::Command::TxnCommit(pb::TxnCommitOffsets {
        commit: Some(c),
        classic,
        producer_id: 7,
        producer_epoch: 0,
        transaction_start,
        owed_marker: None,
    }))
}

/// Group `g` with one member `m` subscribed to topic `a`, joined through a group change.
fn with_member(m: &mut OffsetsMachine) {
    let member =
        crate::groups::Member { member_id: "m".into(), subscribed: ["a".to_string()].into(), ..Default::default() };
    let change = pb::ConsumerGroupChange {
        group_id: "g".into(),
        expect_version: 0,
        meta: Some(crate::groups::ConsumerGroup { group_id: "g".into(), ..Default::default() }.meta_to_proto()),
        upsert_members: vec![crate::groups::group::member_to_proto(&member)],
        ..Default::default()
    };
    m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::GroupChange(change)));
}

fn commit_at(offsets: &[(&str, u32, i64)], at_ms: i64) -> Payload {
    let mut c = pb::OffsetsCommand::decode(commit(offsets).body).unwrap();
    if let Some(pb::offsets_command::Command::Commit(c)) = &mut c.command {
        c.offsets.iter_mut().for_each(|o| o.commit_time_ms = at_ms);
    }
    Payload { units: 0, body: c.encode_to_vec().into(), proposal: 0 }
}

fn expire(m: &mut OffsetsMachine, e: &pb::ExpireOffsets) -> Bytes {
    m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::ExpireOffsets(e.clone())))
}

/// Removes member `m` of group `g` as its expired session would, at `now_ms`.
fn fence_at(m: &mut OffsetsMachine, now_ms: i64) {
    let g = m.groups().get("g").cloned().unwrap();
    let epoch = g.members["m"].epoch;
    let change = crate::groups::heartbeat::fence(&g, "m", epoch, now_ms).unwrap();
    assert_eq!(m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::GroupChange(change))), APPLIED);
}

#[test]
fn offsets_expire_only_after_their_group_has_been_empty_for_the_retention() {
    let mut m = OffsetsMachine::new();
    let id = LogId::default();
    // Without members: each offset `retention` after its commit.
    m.apply(&id, 0, &commit_at(&[("a", 0, 10), ("a", 1, 20)], 5));
    assert!(m.expired_offsets(104, 100).is_empty(), "not yet");
    let decided = m.expired_offsets(105, 100);
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].offsets.len(), 2);
    // Committed again before the expiry applies: that offset stays.
    m.apply(&id, 0, &commit_at(&[("a", 1, 25)], 50));
    assert_ne!(expire(&mut m, &decided[0]), REFUSED);
    assert_eq!(m.state().committed("g", "a", 0), None);
    assert_eq!(m.state().committed("g", "a", 1).map(|c| c.offset), Some(25));

    // A member in: nothing expires, however old.
    with_member(&mut m);
    assert!(m.expired_offsets(1_000_000, 100).is_empty(), "a live group keeps its offsets");
    let refused = pb::ExpireOffsets {
        group_id: "g".into(),
        offsets: vec![pb::ExpiredOffset { topic: "a".into(), partition: 1, commit_time_ms: 50 }],
        ..Default::default()
    };
    assert_eq!(expire(&mut m, &refused), REFUSED, "apply refuses it too");
    assert!(m.state().committed("g", "a", 1).is_some());

    // The member goes at 1,000: the retention runs from then, not from the commit at 50.
    fence_at(&mut m, 1_000);
    assert_eq!(m.groups().get("g").map(|g| g.empty_since_ms), Some(1_000));
    assert!(m.expired_offsets(1_099, 100).is_empty());
    let decided = m.expired_offsets(1_100, 100);
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].empty_since_ms, 1_000);

    // Someone joined and left meanwhile (empty again since 2,000): the decision is stale.
    with_member_again(&mut m);
    fence_at(&mut m, 2_000);
    assert_eq!(expire(&mut m, &decided[0]), REFUSED);
    assert!(m.state().committed("g", "a", 1).is_some());

    // Joined and left within the same millisecond: the record's version still tells.
    let decided = m.expired_offsets(2_100, 100);
    with_member_again(&mut m);
    fence_at(&mut m, 2_000);
    assert_eq!(expire(&mut m, &decided[0]), REFUSED, "same empty-since time, another version");

    // Decided again: applied; with no offsets and no members the group is gone.
    let decided = m.expired_offsets(2_100, 100);
    assert_ne!(expire(&mut m, &decided[0]), REFUSED);
    assert_eq!(m.state().group("g").count(), 0);
    assert!(m.groups().get("g").is_none(), "the empty group's record went with its last offset");
    assert!(m.expired_offsets(1_000_000, 100).is_empty(), "nothing left");
}

/// Member `m` joins group `g` again (the group record exists, empty).
fn with_member_again(m: &mut OffsetsMachine) {
    let g = m.groups().get("g").cloned().unwrap();
    let member =
        crate::groups::Member { member_id: "m".into(), subscribed: ["a".to_string()].into(), ..Default::default() };
    let mut meta = g.meta_to_proto();
    meta.empty_since_ms = 0;
    let change = pb::ConsumerGroupChange {
        group_id: "g".into(),
        expect_version: g.version,
        meta: Some(meta),
        upsert_members: vec![crate::groups::group::member_to_proto(&member)],
        ..Default::default()
    };
    assert_eq!(m.apply(&LogId::default(), 0, &command(pb::offsets_command::Command::GroupChange(change))), APPLIED);
}

#[test]
fn an_empty_group_without_offsets_goes_after_the_retention() {
    let mut m = OffsetsMachine::new();
    with_member(&mut m);
    fence_at(&mut m, 500);
    assert!(m.expired_offsets(599, 100).is_empty());
    let decided = m.expired_offsets(600, 100);
    assert_eq!(decided.len(), 1);
    assert!(decided[0].offsets.is_empty());
    assert_ne!(expire(&mut m, &decided[0]), REFUSED);
    assert!(m.groups().get("g").is_none());
}

#[test]
fn groups_are_deleted_only_without_members_and_offsets_only_of_unsubscribed_topics() {
    let id = LogId::default();
    let mut m = OffsetsMachine::new();
    m.apply(&id, 0, &commit(&[("a", 0, 10), ("b", 0, 20)]));
    with_member(&mut m);
    let delete_group = || command(pb::offsets_command::Command::DeleteGroup(pb::DeleteGroup { group_id: "g".into() }));
    let delete_offsets = |topic: &str| {
        command(pb::offsets_command::Command::DeleteOffsets(pb::DeleteOffsets {
            group_id: "g".into(),
            partitions: vec![pb::TopicPartitionSet { topic: topic.into(), partitions: vec![0] }],
        }))
    };
    assert_eq!(m.apply(&id, 0, &delete_group()).as_ref(), REFUSED, "the group has a member");
    assert_eq!(m.apply(&id, 0, &delete_offsets("a")).as_ref(), REFUSED, "the member subscribes to a");
    assert!(m.apply(&id, 0, &delete_offsets("b")).is_empty());
    assert_eq!(m.state().committed("g", "b", 0), None);
    assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(10));
    assert!(matches!(
        check_delete_group(m.state(), m.groups(), m.classic_groups(), "nope"),
        Err(CoordinatorError::GroupIdNotFound(_))
    ));
    // Without members the group goes, offsets and all.
    let mut empty = OffsetsMachine::new();
    empty.apply(&id, 0, &commit(&[("a", 0, 10)]));
    assert!(empty.apply(&id, 0, &delete_group()).is_empty());
    assert_eq!(empty.state().group_count(), 0);
    assert!(empty.groups().is_empty());
}

#[test]
fn a_classic_group_is_in_the_snapshot_and_its_members_keep_it_from_deletes_and_standalone_commits() {
    use crate::groups::classic::{ClassicGroup, ClassicMember};
    let id = LogId::default();
    let mut m = OffsetsMachine::new();
    assert!(m.apply(&id, 0, &commit(&[("a", 0, 10)])).is_empty(), "no members: a standalone commit applies");
    let member = ClassicMember { member_id: "m".into(), assignment: Bytes::from_static(b"a-0"), ..Default::default() };
    let group = ClassicGroup {
        group_id: "g".into(),
        generation: 3,
        protocol_type: "consumer".into(),
        protocol: Some("range".into()),
        leader: Some("m".into()),
        members: [("m".to_string(), member)].into(),
        ..Default::default()
    };
    let record = pb::ClassicGroupRecord { expect_version: 0, group: Some(group.to_proto()) };
    let write = command(pb::offsets_command::Command::ClassicGroup(record));
    assert_eq!(m.apply(&id, 0, &write).as_ref(), APPLIED);
    assert_eq!(m.apply(&id, 0, &write).as_ref(), CONFLICT, "decided from version 0, the group is at 1");
    assert_eq!(m.apply(&id, 0, &commit(&[("a", 0, 11)])).as_ref(), REFUSED, "the group has a member");
    let delete = command(pb::offsets_command::Command::DeleteGroup(pb::DeleteGroup { group_id: "g".into() }));
    assert_eq!(m.apply(&id, 0, &delete).as_ref(), REFUSED);
    assert_eq!(
        check_delete_group(m.state(), m.groups(), m.classic_groups(), "g"),
        Err(CoordinatorError::GroupNotEmpty { group_id: "g".into(), members: 1 })
    );
    let snap = m.snapshot().unwrap();
    let mut back = OffsetsMachine::new();
    back.restore(&snap).unwrap();
    assert_eq!(back.classic_groups(), m.classic_groups());
    assert_eq!(back.classic_groups().get("g").map(|g| (g.version, g.generation)), Some((1, 3)));
    assert_eq!(back.state(), m.state());
}

#[test]
fn an_owed_marker_in_a_commit_ends_the_decided_transaction_first() {
    let id = |index| LogId { index, ..LogId::default() };
    let mut m = OffsetsMachine::new();
    // Transaction 8's offsets, pending; transaction 10's arrive with transaction 8's commit
    // marker, still owed: 8's are committed first, 10's pending.
    let commit_of = |offset: i64, start: u64, owed: Option<u64>| {
        let mut p = txn_commit_of("", -1, false, offset, start);
        let mut cmd = pb::OffsetsCommand::decode(p.body.clone()).unwrap();
        if let Some(pb::offsets_command::Command::TxnCommit(t)) = &mut cmd.command {
            t.owed_marker = owed.map(|transaction_start| pb::TxnOffsetsMarker {
                producer_id: 7,
                coordinator_epoch: 3,
                commit: true,
                transaction_start,
                ..Default::default()
            });
        }
        p.body = cmd.encode_to_vec().into();
        p
    };
    assert!(m.apply(&id(9), 0, &commit_of(50, 8, None)).is_empty());
    assert!(m.apply(&id(10), 0, &commit_of(60, 10, Some(8))).is_empty());
    assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(50), "8's, by its owed marker");
    assert!(m.state().txn().is_pending("g", "a", 0), "10's");
    // Without it, 8's would have been dropped as orphaned: 12's offsets find 10's pending.
    assert!(m.apply(&id(11), 0, &commit_of(70, 12, None)).is_empty());
    assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(50), "10's were dropped");
}

#[test]
fn transactional_offsets_stay_pending_until_the_commit_marker_and_go_with_the_snapshot() {
    let id = |index| LogId { index, ..LogId::default() };
    let mut m = OffsetsMachine::new();
    with_member(&mut m);
    let epoch = m.groups().get("g").map(|g| g.members["m"].epoch).unwrap();
    let txn_commit = |member: &str, transaction_start| txn_commit_of(member, epoch, false, 42, transaction_start);
    assert_eq!(m.apply(&id(1), 0, &txn_commit("stranger", 4)).as_ref(), REFUSED, "not a member");
    // The member owns nothing yet: a member may commit only what it owns.
    assert_eq!(m.apply(&id(2), 0, &txn_commit("m", 4)).as_ref(), REFUSED);
    let mut standalone = OffsetsMachine::new();
    let c = |index| {
        let mut p = txn_commit("", index);
        let mut cmd = pb::OffsetsCommand::decode(p.body.clone()).unwrap();
        if let Some(pb::offsets_command::Command::TxnCommit(t)) = &mut cmd.command {
            if let Some(c) = &mut t.commit {
                c.member_epoch = -1;
            }
        }
        p.body = cmd.encode_to_vec().into();
        p
    };
    assert!(standalone.apply(&id(3), 0, &c(4)).is_empty());
    assert!(standalone.state().txn().is_pending("g", "a", 0));
    assert_eq!(standalone.state().committed("g", "a", 0), None, "pending is not committed");
    let snap = standalone.snapshot().unwrap();
    let mut back = OffsetsMachine::new();
    back.restore(&snap).unwrap();
    assert_eq!(back.state(), standalone.state(), "pending offsets survive a snapshot");
    let marker = |commit| {
        command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
            producer_id: 7,
            producer_epoch: 0,
            coordinator_epoch: 3,
            commit,
            transaction_start: 4,
            written_ms: 1_000,
        }))
    };
    assert!(back.apply(&id(4), 0, &marker(true)).is_empty());
    assert_eq!(back.state().committed("g", "a", 0).map(|c| c.offset), Some(42));
    assert!(!back.state().txn().is_pending("g", "a", 0));
    // A deposed coordinator's marker is refused.
    let old = command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
        producer_id: 7,
        coordinator_epoch: 2,
        ..Default::default()
    }));
    assert_eq!(back.apply(&id(5), 0, &old).as_ref(), REFUSED);
    // A late commit of transaction 4, which ended: refused. Transaction 6's: pending, then
    // dropped by its abort marker.
    assert_eq!(back.apply(&id(6), 0, &c(4)).as_ref(), REFUSED);
    assert!(back.apply(&id(7), 0, &c(6)).is_empty());
    let abort6 = command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
        producer_id: 7,
        coordinator_epoch: 3,
        commit: false,
        transaction_start: 6,
        ..Default::default()
    }));
    assert!(back.apply(&id(8), 0, &abort6).is_empty());
    assert!(!back.state().txn().is_pending("g", "a", 0));
    assert_eq!(back.state().committed("g", "a", 0).map(|c| c.offset), Some(42), "the abort changed nothing");
    // The producer's mark (last written at 1,000 ms) is forgotten only once older than the
    // horizon the leader proposes.
    let prune = |before_ms| command(pb::offsets_command::Command::PruneTxnMarks(pb::PruneTxnMarks { before_ms }));
    assert!(back.apply(&id(9), 0, &prune(1_000)).is_empty());
    assert_eq!(back.state().txn().ended(7), 6);
    assert!(back.apply(&id(10), 0, &prune(1_001)).is_empty());
    assert_eq!(back.state().txn().ended(7), 0, "forgotten");
}

/// A classic member's transactional commit (Kafka's TxnOffsetCommit with a generation):
/// pending at the stored generation, refused at any other, refused in `apply` when the
/// generation moved after the leader checked it, and committed by its marker.
#[test]
fn a_classic_members_transactional_commit_is_checked_against_the_stored_generation() {
    use crate::groups::classic::{ClassicGroup, ClassicMember};
    let id = LogId::default();
    let mut m = OffsetsMachine::new();
    let generation = |generation: i32, expect_version: u64| {
        let member =
            ClassicMember { member_id: "m".into(), assignment: Bytes::from_static(b"a-0"), ..Default::default() };
        let group = ClassicGroup {
            group_id: "g".into(),
            generation,
            protocol_type: "consumer".into(),
            protocol: Some("range".into()),
            leader: Some("m".into()),
            members: [("m".to_string(), member)].into(),
            ..Default::default()
        };
        let record = pb::ClassicGroupRecord { expect_version, group: Some(group.to_proto()) };
        command(pb::offsets_command::Command::ClassicGroup(record))
    };
    let txn_commit = |member: &str, generation: i32, offset: i64, transaction_start: u64| {
        txn_commit_of(member, generation, true, offset, transaction_start)
    };
    assert_eq!(m.apply(&id, 0, &generation(3, 0)).as_ref(), APPLIED);
    let committer = |generation| Committer::Classic { member_id: "m", generation };
    let partitions = || std::iter::once(("a", 0));
    assert_eq!(check_commit(m.groups(), m.classic_groups(), "g", committer(3), partitions()), Ok(()));
    assert_eq!(
        check_commit(m.groups(), m.classic_groups(), "g", committer(2), partitions()),
        Err(CoordinatorError::IllegalGeneration { group_id: "g".into(), member_id: "m".into(), sent: 2, current: 3 })
    );
    assert_eq!(m.apply(&id, 0, &txn_commit("m", 2, 40, 4)).as_ref(), REFUSED, "an older generation");
    assert_eq!(m.apply(&id, 0, &txn_commit("other", 3, 40, 4)).as_ref(), REFUSED, "not a member");
    assert!(!m.state().txn().is_pending("g", "a", 0));
    assert!(m.apply(&id, 0, &txn_commit("m", 3, 40, 4)).is_empty(), "the stored generation");
    assert!(m.state().txn().is_pending("g", "a", 0));
    assert_eq!(m.state().committed("g", "a", 0), None, "pending is not committed");
    // The group rebalanced after a commit at generation 4 was checked on the leader: it
    // commits nothing.
    assert_eq!(m.apply(&id, 0, &generation(4, 1)).as_ref(), APPLIED);
    assert_eq!(m.apply(&id, 0, &txn_commit("m", 3, 41, 4)).as_ref(), REFUSED, "generation 3 is gone");
    let marker = command(pb::offsets_command::Command::TxnMarker(pb::TxnOffsetsMarker {
        producer_id: 7,
        producer_epoch: 0,
        coordinator_epoch: 1,
        commit: true,
        transaction_start: 4,
        written_ms: 1_000,
    }));
    assert!(m.apply(&id, 0, &marker).is_empty());
    assert_eq!(m.state().committed("g", "a", 0).map(|c| c.offset), Some(40), "what generation 3 committed");
    assert!(!m.state().txn().is_pending("g", "a", 0));
}

#[test]
fn group_ids_are_checked() {
    assert!(validate_group_id("orders-service").is_ok());
    assert!(validate_group_id("").is_err());
    assert!(validate_group_id(&"g".repeat(256)).is_err());
}
