//! The classic engine driven the way Kafka consumers drive a coordinator: JoinGroup (twice, for
//! a new member's id), SyncGroup, Heartbeat, LeaveGroup, OffsetCommit — against a real
//! [`OffsetsMachine`] that applies every record the engine asks to persist. Time is the `now` the
//! test passes; nothing sleeps.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;
use rill_proto::coordinator as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};

use super::config::INITIAL_REBALANCE_DELAY_MS;
use super::engine::{
    EMPTY_PERSIST_RETRY_MS, MAX_ASSIGNMENT_BYTES, MAX_GROUP_MEMBERS_BYTES, MAX_GROUP_RECORD_BYTES,
    MAX_PROTOCOL_METADATA_BYTES, MAX_SYNC_ASSIGNMENTS_BYTES, MIN_REBALANCE_TIMEOUT_MS,
};
use super::*;
use crate::error::CoordinatorError;
use crate::groups::group::{member_to_proto, ConsumerGroup, Member};
use crate::offsets::machine::CONFLICT;
use crate::offsets::{check_commit, check_delete_group, Committer, OffsetsMachine, APPLIED, REFUSED};

const GROUP: &str = "g";
const SESSION_MS: u32 = 10_000;
const REBALANCE_MS: u32 = 30_000;

fn protocol(name: &str, metadata: &str) -> Protocol {
    Protocol { name: name.into(), metadata: Bytes::from(metadata.to_string()) }
}

/// A Kafka consumer's view of itself.
#[derive(Debug, Clone)]
struct Consumer {
    client_id: String,
    member_id: String,
    instance_id: Option<String>,
    generation: i32,
    protocol_type: String,
    protocols: Vec<Protocol>,
    rebalance_timeout_ms: u32,
    assignment: Bytes,
}

impl Consumer {
    fn dynamic(client_id: &str) -> Self {
        Consumer {
            client_id: client_id.into(),
            member_id: String::new(),
            instance_id: None,
            generation: -1,
            protocol_type: "consumer".into(),
            protocols: vec![protocol("range", &format!("{client_id} reads t"))],
            rebalance_timeout_ms: REBALANCE_MS,
            assignment: Bytes::new(),
        }
    }

    fn with_instance(client_id: &str, instance_id: &str) -> Self {
        Consumer { instance_id: Some(instance_id.into()), ..Self::dynamic(client_id) }
    }

    fn join_req(&self) -> JoinGroup {
        JoinGroup {
            group_id: GROUP.into(),
            member_id: self.member_id.clone(),
            instance_id: self.instance_id.clone(),
            protocol_type: self.protocol_type.clone(),
            protocols: self.protocols.clone(),
            session_timeout_ms: SESSION_MS,
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            client_id: self.client_id.clone(),
            client_host: "/10.0.0.1".into(),
            legacy_member_id: false,
        }
    }

    fn heartbeat_req(&self) -> Heartbeat {
        Heartbeat {
            group_id: GROUP.into(),
            member_id: self.member_id.clone(),
            instance_id: self.instance_id.clone(),
            generation: self.generation,
        }
    }

    fn sync_req(&self, assignments: Vec<(String, Bytes)>) -> SyncGroup {
        SyncGroup {
            group_id: GROUP.into(),
            member_id: self.member_id.clone(),
            instance_id: self.instance_id.clone(),
            generation: self.generation,
            protocol_type: Some(self.protocol_type.clone()),
            protocol_name: None,
            assignments,
        }
    }

    fn leaving(&self) -> Leaving {
        Leaving { member_id: self.member_id.clone(), instance_id: self.instance_id.clone() }
    }
}

/// What the leader assigns `member_id` in `generation`.
fn assignment_of(member_id: &str, generation: i32) -> Bytes {
    Bytes::from(format!("{member_id}@{generation}"))
}

/// One coordinator: its state machine and its leader's engine, and the answers handed out.
struct Coordinator {
    machine: OffsetsMachine,
    engine: ClassicEngine,
    now: i64,
    next_handle: u64,
    answers: BTreeMap<Handle, Answer>,
    /// Persists not carried out yet (while `hold_persists`).
    held: Vec<Persist>,
    hold_persists: bool,
}

/// Member ids `prefix-1`, `prefix-2`, ...: the same every run.
fn counting_ids() -> MemberIds {
    let mut n = 0;
    Box::new(move |prefix: &str| {
        n += 1;
        format!("{prefix}-{n}")
    })
}

impl Coordinator {
    fn new() -> Self {
        Self::with_config(ClassicConfig::default())
    }

    fn with_config(config: ClassicConfig) -> Self {
        let machine = OffsetsMachine::new();
        let engine = ClassicEngine::new(config, machine.classic_groups(), 0, counting_ids());
        Coordinator {
            machine,
            engine,
            now: 0,
            next_handle: 0,
            answers: BTreeMap::new(),
            held: Vec::new(),
            hold_persists: false,
        }
    }

    /// A new leader's engine over this machine's state, at the current time.
    fn fail_over(&mut self) {
        self.engine =
            ClassicEngine::new(ClassicConfig::default(), self.machine.classic_groups(), self.now, counting_ids());
    }

    fn carry_out(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Respond(h, answer) => {
                    assert!(self.answers.insert(h, answer).is_none(), "{h:?} answered twice");
                }
                Effect::Persist(p) if self.hold_persists => self.held.push(p),
                Effect::Persist(p) => self.store(p),
            }
        }
    }

    /// Proposes `p` to the machine and reports how it went, as a server does.
    fn store(&mut self, p: Persist) {
        let command = pb::OffsetsCommand { command: Some(pb::offsets_command::Command::ClassicGroup(p.record)) };
        let answer = self.apply(command);
        let result = applied(&p.group_id, &answer);
        let effects = self.engine.persisted(self.now, self.machine.replicated(), p.id, result);
        self.carry_out(effects);
    }

    fn fail(&mut self, p: Persist, error: CoordinatorError) {
        let effects = self.engine.persisted(self.now, self.machine.replicated(), p.id, Err(error));
        self.carry_out(effects);
    }

    fn apply(&mut self, command: pb::OffsetsCommand) -> Bytes {
        let payload = Payload { units: 0, body: command.encode_to_vec().into(), proposal: 0 };
        self.machine.apply(&LogId::default(), 0, &payload)
    }

    fn handle(&mut self) -> Handle {
        self.next_handle += 1;
        Handle(self.next_handle)
    }

    fn join(&mut self, req: &JoinGroup) -> Handle {
        let h = self.handle();
        let effects = self.engine.join(self.now, self.machine.replicated(), h, req);
        self.carry_out(effects);
        h
    }

    fn sync(&mut self, req: &SyncGroup) -> Handle {
        let h = self.handle();
        let effects = self.engine.sync(self.now, self.machine.replicated(), h, req);
        self.carry_out(effects);
        h
    }

    fn heartbeat(&mut self, c: &Consumer) -> crate::Result<()> {
        self.engine.heartbeat(self.now, self.machine.replicated(), &c.heartbeat_req())
    }

    fn leave(&mut self, members: Vec<Leaving>) -> Vec<crate::Result<()>> {
        let req = LeaveGroup { group_id: GROUP.into(), members };
        let outcome = self.engine.leave(self.now, self.machine.replicated(), &req).unwrap();
        self.carry_out(outcome.effects);
        outcome.members.into_iter().map(|l| l.result).collect()
    }

    fn is_answered(&self, h: Handle) -> bool {
        self.answers.contains_key(&h)
    }

    fn must_join_answer(&mut self, h: Handle) -> crate::Result<JoinAnswer> {
        match self.answers.remove(&h) {
            Some(Answer::Join(a)) => a,
            other => panic!("{h:?}: expected a JoinGroup answer, got {other:?}"),
        }
    }

    fn must_sync_answer(&mut self, h: Handle) -> crate::Result<SyncAnswer> {
        match self.answers.remove(&h) {
            Some(Answer::Sync(a)) => a,
            other => panic!("{h:?}: expected a SyncGroup answer, got {other:?}"),
        }
    }

    /// `c` joined: it takes its id and generation from the answer.
    fn must_join(&mut self, c: &mut Consumer, h: Handle) -> JoinAnswer {
        let a = self.must_join_answer(h).unwrap_or_else(|e| panic!("{} did not join: {e}", c.client_id));
        c.member_id = a.member_id.clone();
        c.generation = a.generation;
        a
    }

    /// `c` synced: it takes its assignment from the answer.
    fn must_sync(&mut self, c: &mut Consumer, h: Handle) -> SyncAnswer {
        let a = self.must_sync_answer(h).unwrap_or_else(|e| panic!("{} did not sync: {e}", c.client_id));
        c.assignment = a.assignment.clone();
        a
    }

    /// A new dynamic consumer's first JoinGroup (answered `MEMBER_ID_REQUIRED` with its id) and
    /// its second, with the id: the handle of the second, parked.
    fn join_new(&mut self, c: &mut Consumer) -> Handle {
        let first = self.join(&c.join_req());
        match self.must_join_answer(first) {
            Err(CoordinatorError::MemberIdRequired { member_id, .. }) => c.member_id = member_id,
            other => panic!("a new member is first given its id, got {other:?}"),
        }
        self.join(&c.join_req())
    }

    /// Lets time pass to `t`, firing every deadline at its time.
    fn advance_to(&mut self, t: i64) {
        while let Some(at) = self.engine.next_deadline().filter(|at| *at <= t) {
            self.now = self.now.max(at);
            let effects = self.engine.tick(self.now, self.machine.replicated());
            self.carry_out(effects);
        }
        self.now = t;
    }

    fn advance(&mut self, ms: u32) {
        self.advance_to(self.now + i64::from(ms));
    }

    /// Lets the initial rebalance run its course: each member that joined during a delay extends
    /// it by another delay.
    fn wait_for_initial_rebalance(&mut self, handles: &[Handle]) {
        for _ in 0..20 {
            self.advance(INITIAL_REBALANCE_DELAY_MS);
            if handles.iter().all(|h| self.is_answered(*h)) {
                return;
            }
        }
        panic!("the initial rebalance did not end: {:?}", self.describe());
    }

    fn describe(&self) -> ClassicDescription {
        self.engine.describe(GROUP, self.machine.classic_groups()).expect("the group exists")
    }

    fn stored(&self) -> &ClassicGroup {
        self.machine.classic_groups().get(GROUP).expect("the group is stored")
    }

    /// Every consumer syncs (the leader last, with an assignment for everyone); all get theirs.
    fn sync_all(&mut self, consumers: &mut [Consumer], leader: &str) {
        let mut handles = Vec::new();
        for c in consumers.iter().filter(|c| c.member_id != leader) {
            handles.push((c.member_id.clone(), self.sync(&c.sync_req(Vec::new()))));
        }
        let Some(l) = consumers.iter().find(|c| c.member_id == leader) else { panic!("no leader {leader}") };
        let assignments =
            consumers.iter().map(|c| (c.member_id.clone(), assignment_of(&c.member_id, c.generation))).collect();
        handles.push((leader.to_string(), self.sync(&l.sync_req(assignments))));
        for (id, h) in handles {
            let Some(c) = consumers.iter_mut().find(|c| c.member_id == id) else { continue };
            self.must_sync(c, h);
            assert_eq!(c.assignment, assignment_of(&c.member_id, c.generation));
        }
    }

    /// New consumers join an empty group together and sync: the group is stable at generation
    /// 1. Returns the leader's member id.
    fn stable_group(&mut self, consumers: &mut [Consumer]) -> String {
        let handles: Vec<Handle> = consumers
            .iter_mut()
            .map(|c| if c.instance_id.is_some() { self.join(&c.join_req()) } else { self.join_new(c) })
            .collect();
        self.wait_for_initial_rebalance(&handles);
        let mut leader = String::new();
        for (c, h) in consumers.iter_mut().zip(handles) {
            leader = self.must_join(c, h).leader;
        }
        self.sync_all(consumers, &leader);
        assert_eq!(self.describe().state, ClassicState::Stable);
        leader
    }
}

#[test]
fn a_consumer_joins_gets_the_member_list_as_leader_syncs_and_gets_its_assignment() {
    let mut co = Coordinator::new();
    let mut c = Consumer::dynamic("app");

    tracing::info!("--- the first JoinGroup is answered with a member id to join with");
    let first = co.join(&c.join_req());
    let Err(CoordinatorError::MemberIdRequired { member_id, .. }) = co.must_join_answer(first) else {
        panic!("MEMBER_ID_REQUIRED expected")
    };
    assert_eq!(member_id, "app-1", "client id and a unique suffix");
    assert_eq!(co.describe().state, ClassicState::Empty);
    assert_eq!(co.describe().pending_members, 1);
    c.member_id = member_id;

    tracing::info!("--- the second is parked for the initial delay");
    let join = co.join(&c.join_req());
    assert!(!co.is_answered(join));
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
    assert_eq!(co.engine.next_deadline(), Some(i64::from(INITIAL_REBALANCE_DELAY_MS)));
    co.advance(INITIAL_REBALANCE_DELAY_MS - 1);
    assert!(!co.is_answered(join), "the initial rebalance waits its whole delay");
    co.advance(1);
    let answer = co.must_join(&mut c, join);
    assert_eq!(answer.generation, 1);
    assert_eq!((answer.protocol_type.as_str(), answer.protocol_name.as_str()), ("consumer", "range"));
    assert_eq!(answer.leader, c.member_id, "the only member leads");
    assert_eq!(answer.members.len(), 1);
    assert_eq!(answer.members[0].metadata, Bytes::from("app reads t"), "the leader gets every member's metadata");
    assert_eq!(co.describe().state, ClassicState::CompletingRebalance);

    tracing::info!("--- before its assignment it heartbeats, but may not commit");
    co.heartbeat(&c).unwrap();
    assert!(matches!(
        co.engine.check_commit(GROUP, &c.member_id, None, 1),
        Err(CoordinatorError::RebalanceInProgress { .. })
    ));

    tracing::info!("--- the leader's SyncGroup is answered only once its assignment is stored");
    co.hold_persists = true;
    let sync = co.sync(&c.sync_req(vec![(c.member_id.clone(), assignment_of(&c.member_id, 1))]));
    assert!(!co.is_answered(sync));
    let persist = co.held.pop().expect("the assignment is persisted");
    assert_eq!(persist.record.expect_version, 0, "the group has no record yet");
    let record = persist.record.group.clone().unwrap();
    assert_eq!((record.generation, record.leader.as_str(), record.members.len()), (1, "app-1", 1));
    assert_eq!(record.members[0].assignment, assignment_of("app-1", 1));
    co.store(persist);
    assert_eq!(co.must_sync(&mut c, sync).assignment, assignment_of("app-1", 1));
    assert_eq!(co.describe().state, ClassicState::Stable);
    assert_eq!(co.stored().generation, 1);

    tracing::info!("--- stable: heartbeats, a SyncGroup again, commits");
    co.heartbeat(&c).unwrap();
    let again = co.sync(&c.sync_req(Vec::new()));
    assert_eq!(co.must_sync_answer(again).unwrap().assignment, assignment_of("app-1", 1));
    co.engine.check_commit(GROUP, &c.member_id, None, 1).unwrap();
    let m = &co.machine;
    let committer = Committer::Classic { member_id: &c.member_id, generation: 1 };
    check_commit(m.groups(), m.classic_groups(), GROUP, committer, std::iter::empty()).unwrap();
}

#[test]
fn each_new_member_extends_the_initial_delay_up_to_the_rebalance_timeout() {
    let mut co = Coordinator::new();
    let mut consumers: Vec<Consumer> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| Consumer { rebalance_timeout_ms: 7_000, ..Consumer::dynamic(id) })
        .collect();
    // a at 0: the phase would end at 3000 (and at most 7000 — a's rebalance timeout).
    let mut handles = vec![co.join_new(&mut consumers[0])];
    co.advance_to(1_000);
    handles.push(co.join_new(&mut consumers[1]));
    // b joined: at 3000 the phase waits another 3000.
    co.advance_to(5_000);
    handles.push(co.join_new(&mut consumers[2]));
    // c joined: at 6000 it waits only the 1000 left of the rebalance timeout.
    co.advance_to(6_500);
    handles.push(co.join_new(&mut consumers[3]));
    co.advance_to(6_999);
    assert!(handles.iter().all(|h| !co.is_answered(*h)), "nobody is answered before 7000");
    co.advance_to(7_000);
    for (c, h) in consumers.iter_mut().zip(handles) {
        assert_eq!(co.must_join(c, h).generation, 1, "all four in one generation");
    }
    assert_eq!(co.describe().members.len(), 4);
}

#[test]
fn a_new_member_makes_the_others_rejoin_and_the_generation_moves() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    let leader = co.stable_group(std::slice::from_mut(&mut a));
    assert_eq!(leader, a.member_id);

    tracing::info!("--- b joins: a rebalance starts, a hears of it from its heartbeat");
    let mut b = Consumer::dynamic("b");
    let b_join = co.join_new(&mut b);
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
    assert!(matches!(co.heartbeat(&a), Err(CoordinatorError::RebalanceInProgress { .. })));
    assert!(matches!(co.engine.check_commit(GROUP, &a.member_id, None, 1), Ok(())), "a may commit what it gives up");
    let stale_sync = co.sync(&a.sync_req(Vec::new()));
    assert!(matches!(co.must_sync_answer(stale_sync), Err(CoordinatorError::RebalanceInProgress { .. })));

    tracing::info!("--- a rejoins: everyone is in, the join phase ends at once");
    let a_join = co.join(&a.join_req());
    let a_answer = co.must_join(&mut a, a_join);
    let b_answer = co.must_join(&mut b, b_join);
    assert_eq!((a_answer.generation, b_answer.generation), (2, 2));
    assert_eq!(a_answer.leader, a.member_id, "the leader rejoined: it stays the leader");
    let metadata: Vec<(String, Bytes)> =
        a_answer.members.iter().map(|m| (m.member_id.clone(), m.metadata.clone())).collect();
    assert_eq!(
        metadata,
        [(a.member_id.clone(), Bytes::from("a reads t")), (b.member_id.clone(), Bytes::from("b reads t"))]
    );
    assert!(b_answer.members.is_empty(), "only the leader gets the member list");

    tracing::info!("--- the follower's SyncGroup waits for the leader's");
    let b_sync = co.sync(&b.sync_req(Vec::new()));
    assert!(!co.is_answered(b_sync));
    let assignments = vec![
        (a.member_id.clone(), assignment_of(&a.member_id, 2)),
        (b.member_id.clone(), assignment_of(&b.member_id, 2)),
    ];
    let a_sync = co.sync(&a.sync_req(assignments));
    assert_eq!(co.must_sync(&mut b, b_sync).assignment, assignment_of(&b.member_id, 2));
    assert_eq!(co.must_sync(&mut a, a_sync).assignment, assignment_of(&a.member_id, 2));
    assert_eq!(co.stored().generation, 2);
    assert_eq!(co.stored().version, 2, "one record per generation");

    tracing::info!("--- a follower rejoining unchanged gets the generation at once; the leader's rejoin rebalances");
    let again = co.join(&b.join_req());
    let answer = co.must_join_answer(again).unwrap();
    assert_eq!((answer.generation, answer.members.len()), (2, 0));
    assert_eq!(co.describe().state, ClassicState::Stable);
    let leader_again = co.join(&a.join_req());
    assert!(!co.is_answered(leader_again));
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
}

#[test]
fn stale_generations_are_refused_on_sync_heartbeat_and_commit() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::dynamic("a"), Consumer::dynamic("b")];
    co.stable_group(&mut consumers);
    let old = consumers[1].clone();

    tracing::info!("--- a commit decided at generation 1 ...");
    co.engine.check_commit(GROUP, &old.member_id, None, 1).unwrap();
    let commit_at = |generation: i32, member_id: &str| pb::OffsetsCommand {
        command: Some(pb::offsets_command::Command::ClassicCommit(pb::CommitOffsets {
            group_id: GROUP.into(),
            offsets: vec![pb::CommittedOffset {
                topic: "t".into(),
                topic_id: Bytes::from_static(&[1; 16]),
                partition: 0,
                offset: 42,
                metadata: String::new(),
                commit_time_ms: 0,
                leader_epoch: None,
            }],
            member_id: member_id.into(),
            member_epoch: generation,
        })),
    };

    tracing::info!("--- ... while a rebalance moves the group to generation 2");
    let handles: Vec<Handle> = consumers.iter().map(|c| co.join(&c.join_req())).collect();
    for (c, h) in consumers.iter_mut().zip(handles) {
        co.must_join(c, h);
    }
    assert!(consumers.iter().all(|c| c.generation == 2));
    assert!(matches!(
        co.engine.check_commit(GROUP, &old.member_id, None, 2),
        Err(CoordinatorError::RebalanceInProgress { .. })
    ));
    let leader = co.describe().leader;
    co.sync_all(&mut consumers, &leader);

    tracing::info!("--- the old generation is refused everywhere");
    assert!(matches!(co.heartbeat(&old), Err(CoordinatorError::IllegalGeneration { sent: 1, current: 2, .. })));
    let h = co.sync(&old.sync_req(Vec::new()));
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::IllegalGeneration { .. })));
    assert!(matches!(
        co.engine.check_commit(GROUP, &old.member_id, None, 1),
        Err(CoordinatorError::IllegalGeneration { .. })
    ));
    assert_eq!(co.apply(commit_at(1, &old.member_id)).as_ref(), REFUSED, "decided at 1, applied at 2: refused");
    assert_eq!(co.machine.state().committed(GROUP, "t", 0), None);
    assert!(co.apply(commit_at(2, &old.member_id)).is_empty(), "the current generation commits");
    assert_eq!(co.machine.state().committed(GROUP, "t", 0).map(|c| c.offset), Some(42));
    assert_eq!(co.apply(commit_at(2, "stranger")).as_ref(), REFUSED);
    co.heartbeat(&consumers[1]).unwrap();
}

#[test]
fn unknown_members_and_fenced_instances_are_refused() {
    let mut co = Coordinator::new();
    let stranger = Consumer { member_id: "stranger".into(), generation: 1, ..Consumer::dynamic("x") };
    assert!(matches!(co.heartbeat(&stranger), Err(CoordinatorError::UnknownMemberId { .. })), "no group");
    let h = co.join(&stranger.join_req());
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::UnknownMemberId { .. })), "a made-up member id");
    assert!(co.engine.describe(GROUP, co.machine.classic_groups()).is_none(), "refusals leave nothing behind");

    let mut consumers = vec![Consumer::with_instance("a", "instance-a"), Consumer::dynamic("b")];
    co.stable_group(&mut consumers);
    assert!(matches!(co.heartbeat(&stranger), Err(CoordinatorError::UnknownMemberId { .. })));
    let h = co.sync(&stranger.sync_req(Vec::new()));
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::UnknownMemberId { .. })));
    assert_eq!(
        co.engine.check_commit(GROUP, "", None, -1),
        Err(CoordinatorError::UnknownMemberId { group_id: GROUP.into(), member_id: String::new() }),
        "a commit without a member needs an empty group"
    );

    // b claims a's instance id: fenced.
    let impostor = Consumer { instance_id: Some("instance-a".into()), ..consumers[1].clone() };
    assert!(matches!(co.heartbeat(&impostor), Err(CoordinatorError::FencedInstanceId { .. })));
    let h = co.sync(&impostor.sync_req(Vec::new()));
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::FencedInstanceId { .. })));
    let h = co.join(&impostor.join_req());
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::FencedInstanceId { .. })));
    assert!(matches!(
        co.engine.check_commit(GROUP, &impostor.member_id, Some("instance-a"), 1),
        Err(CoordinatorError::FencedInstanceId { .. })
    ));
    // An instance id nobody holds.
    let unheld = Consumer { instance_id: Some("instance-z".into()), ..consumers[1].clone() };
    assert!(matches!(co.heartbeat(&unheld), Err(CoordinatorError::UnknownMemberId { .. })));
    assert_eq!(co.describe().state, ClassicState::Stable, "refused requests change nothing");
}

#[test]
fn leaving_starts_a_rebalance_and_the_last_to_leave_empties_the_group() {
    let mut co = Coordinator::new();
    let mut consumers =
        vec![Consumer::dynamic("a"), Consumer::with_instance("b", "instance-b"), Consumer::dynamic("c")];
    co.stable_group(&mut consumers);
    let [mut a, b, c] = <[Consumer; 3]>::try_from(consumers).unwrap();

    tracing::info!("--- c leaves; b is removed by its instance id (an administrator); a stranger is unknown");
    let results = co.leave(vec![
        c.leaving(),
        Leaving { member_id: String::new(), instance_id: b.instance_id.clone() },
        Leaving { member_id: "stranger".into(), instance_id: None },
    ]);
    assert!(results[0].is_ok() && results[1].is_ok());
    assert!(matches!(results[2], Err(CoordinatorError::UnknownMemberId { .. })));
    assert!(matches!(co.heartbeat(&a), Err(CoordinatorError::RebalanceInProgress { .. })));
    assert!(matches!(co.heartbeat(&b), Err(CoordinatorError::UnknownMemberId { .. })));

    tracing::info!("--- a rejoins alone: generation 2");
    let h = co.join(&a.join_req());
    assert_eq!(co.must_join(&mut a, h).generation, 2);
    let leader = a.member_id.clone();
    co.sync_all(std::slice::from_mut(&mut a), &leader);

    tracing::info!("--- a member id handed out and not used yet may leave too");
    let mut d = Consumer::dynamic("d");
    let first = co.join(&d.join_req());
    let Err(CoordinatorError::MemberIdRequired { member_id, .. }) = co.must_join_answer(first) else { panic!() };
    d.member_id = member_id;
    assert_eq!(co.leave(vec![d.leaving()]), [Ok(())]);
    assert_eq!(co.describe().pending_members, 0);
    assert_eq!(co.describe().state, ClassicState::Stable, "an id never used leaves no gap to rebalance for");
    let h = co.join(&d.join_req());
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::UnknownMemberId { .. })));

    tracing::info!("--- the last member leaves: empty at generation 3, and that is stored");
    let stored_before = co.stored().version;
    assert_eq!(co.leave(vec![a.leaving()]), [Ok(())]);
    let d = co.describe();
    assert_eq!((d.state, d.generation, d.members.len()), (ClassicState::Empty, 3, 0));
    let stored = co.stored();
    assert_eq!((stored.generation, stored.members.len(), stored.version), (3, 0, stored_before + 1));
    assert!(co.engine.next_deadline().is_none(), "nothing left to time");
    co.engine.check_commit(GROUP, "", None, -1).unwrap();
    let m = &co.machine;
    check_commit(m.groups(), m.classic_groups(), GROUP, Committer::Standalone, std::iter::empty()).unwrap();
    check_delete_group(m.state(), m.groups(), m.classic_groups(), GROUP).unwrap();
}

#[test]
fn a_member_whose_session_expires_is_removed_and_the_group_rebalances() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::dynamic("a"), Consumer::dynamic("b")];
    co.stable_group(&mut consumers);
    let [mut a, b] = <[Consumer; 2]>::try_from(consumers).unwrap();
    // a heartbeats every 3 s; b has gone silent.
    for _ in 0..3 {
        co.advance(3_000);
        co.heartbeat(&a).unwrap();
    }
    assert_eq!(co.describe().state, ClassicState::Stable);
    co.advance(1_000); // 10 s since b was last heard from
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
    assert!(matches!(co.heartbeat(&b), Err(CoordinatorError::UnknownMemberId { .. })));
    assert!(matches!(co.heartbeat(&a), Err(CoordinatorError::RebalanceInProgress { .. })));
    let h = co.join(&a.join_req());
    let answer = co.must_join(&mut a, h);
    assert_eq!((answer.generation, answer.members.len()), (2, 1));
}

#[test]
fn a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::dynamic("a"), Consumer::dynamic("b")];
    co.stable_group(&mut consumers);
    let [mut a, b] = <[Consumer; 2]>::try_from(consumers).unwrap();
    let mut c = Consumer::dynamic("c");
    let start = co.now;
    let c_join = co.join_new(&mut c);
    let a_join = co.join(&a.join_req());
    // b keeps heartbeating (it is alive) but never rejoins (stuck in its poll loop).
    while co.now < start + i64::from(REBALANCE_MS) - 3_000 {
        co.advance(3_000);
        assert!(matches!(co.heartbeat(&b), Err(CoordinatorError::RebalanceInProgress { .. })));
    }
    assert!(!co.is_answered(a_join));
    co.advance_to(start + i64::from(REBALANCE_MS));
    let answer = co.must_join(&mut a, a_join);
    co.must_join(&mut c, c_join);
    assert_eq!(answer.generation, 2);
    let ids: Vec<&str> = answer.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, [a.member_id.as_str(), c.member_id.as_str()], "b was removed");
    assert!(matches!(co.heartbeat(&b), Err(CoordinatorError::UnknownMemberId { .. })));
}

#[test]
fn a_new_member_parked_too_long_is_dropped() {
    let mut co = Coordinator::new();
    let mut a = Consumer { rebalance_timeout_ms: 10 * 60 * 1000, ..Consumer::dynamic("a") };
    co.stable_group(std::slice::from_mut(&mut a));
    let mut b = Consumer::dynamic("b");
    let b_join = co.join_new(&mut b);
    // a heartbeats and never rejoins; the join phase would last 10 minutes.
    for _ in 0..100 {
        co.advance(3_000);
        let _ = co.heartbeat(&a);
    }
    assert!(matches!(co.must_join_answer(b_join), Err(CoordinatorError::UnknownMemberId { .. })), "dropped at 5 min");
    assert_eq!(co.describe().members.len(), 1);
}

#[test]
fn members_that_do_not_sync_in_time_are_removed() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    let mut b = Consumer::dynamic("b");
    let (ha, hb) = (co.join_new(&mut a), co.join_new(&mut b));
    co.wait_for_initial_rebalance(&[ha, hb]);
    let joined_at = co.now;
    let leader = co.must_join(&mut a, ha).leader;
    co.must_join(&mut b, hb);
    assert_eq!(leader, a.member_id);
    let h = co.sync(&a.sync_req(vec![(a.member_id.clone(), assignment_of(&a.member_id, 1))]));
    co.must_sync(&mut a, h);
    assert_eq!(co.describe().state, ClassicState::Stable, "stable once the leader's assignment is stored");
    // b heartbeats but never syncs.
    while co.now + 3_000 < joined_at + i64::from(REBALANCE_MS) {
        co.advance(3_000);
        co.heartbeat(&b).unwrap();
        co.heartbeat(&a).unwrap();
    }
    co.advance_to(joined_at + i64::from(REBALANCE_MS));
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
    assert!(matches!(co.heartbeat(&b), Err(CoordinatorError::UnknownMemberId { .. })));
    let h = co.join(&a.join_req());
    assert_eq!(co.must_join(&mut a, h).generation, 2);
    assert_eq!(co.describe().members.len(), 1);
}

#[test]
fn a_restarted_static_member_gets_its_assignment_back_without_a_rebalance() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::with_instance("a", "instance-a"), Consumer::with_instance("b", "instance-b")];
    let leader = co.stable_group(&mut consumers);
    assert_eq!(leader, consumers[0].member_id, "static members get ids from their instance ids");
    assert_eq!(leader, "instance-a-1");
    let [old_a, old_b] = <[Consumer; 2]>::try_from(consumers).unwrap();
    let version = co.stored().version;

    tracing::info!("--- b's process restarts: no member id, same instance id");
    let mut b = Consumer { member_id: String::new(), generation: -1, assignment: Bytes::new(), ..old_b.clone() };
    co.hold_persists = true;
    let h = co.join(&b.join_req());
    assert!(!co.is_answered(h), "answered once the new member id is stored");
    let persist = co.held.pop().unwrap();
    co.hold_persists = false;
    co.store(persist);
    let answer = co.must_join(&mut b, h);
    assert_ne!(b.member_id, old_b.member_id);
    assert_eq!((answer.generation, answer.leader.as_str(), answer.skip_assignment), (1, leader.as_str(), false));
    assert!(answer.members.is_empty());
    assert_eq!(co.describe().state, ClassicState::Stable, "no rebalance");
    let stored = co.stored();
    assert_eq!((stored.generation, stored.version), (1, version + 1));
    assert!(stored.members.contains_key(&b.member_id) && !stored.members.contains_key(&old_b.member_id));
    let h = co.sync(&b.sync_req(Vec::new()));
    assert_eq!(co.must_sync(&mut b, h).assignment, assignment_of(&old_b.member_id, 1), "its predecessor's assignment");
    assert!(matches!(co.heartbeat(&old_b), Err(CoordinatorError::FencedInstanceId { .. })), "the old id is fenced");
    co.heartbeat(&old_a).unwrap();

    tracing::info!("--- the leader restarts: it leads on, with the member list, and must not reassign");
    let mut a = Consumer { member_id: String::new(), ..old_a.clone() };
    let h = co.join(&a.join_req());
    let answer = co.must_join(&mut a, h);
    assert_eq!(answer.leader, a.member_id);
    assert!(answer.skip_assignment);
    assert_eq!(answer.members.len(), 2);
    assert_eq!(answer.generation, 1);
    let h = co.sync(&a.sync_req(Vec::new()));
    assert_eq!(co.must_sync(&mut a, h).assignment, assignment_of(&old_a.member_id, 1));
    assert_eq!(co.describe().state, ClassicState::Stable);

    tracing::info!("--- a restart whose new id cannot be stored: the old id is the member again");
    let a2 = Consumer { member_id: String::new(), ..old_a };
    co.hold_persists = true;
    let h = co.join(&a2.join_req());
    let persist = co.held.pop().unwrap();
    assert!(matches!(co.heartbeat(&a), Err(CoordinatorError::FencedInstanceId { .. })), "fenced meanwhile");
    co.fail(persist, CoordinatorError::Timeout { waited_ms: 5_000, what: "commit" });
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::NotAvailable(_))));
    co.heartbeat(&a).unwrap();
    assert_eq!(co.describe().leader, a.member_id);
}

#[test]
fn a_static_member_joining_with_other_protocols_rebalances() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::with_instance("a", "instance-a"), Consumer::with_instance("b", "instance-b")];
    for c in consumers.iter_mut() {
        c.protocols = vec![protocol("range", "x"), protocol("sticky", "y")];
    }
    co.stable_group(&mut consumers);
    assert_eq!(co.describe().protocol, "range");
    // b restarts preferring sticky: the votes tie, and a (the leader) prefers range: the
    // selection does not change and no rebalance is needed.
    let b = Consumer {
        member_id: String::new(),
        protocols: vec![protocol("sticky", "y"), protocol("range", "x")],
        ..consumers[1].clone()
    };
    let h = co.join(&b.join_req());
    assert!(co.must_join_answer(h).is_ok());
    assert_eq!(co.describe().state, ClassicState::Stable);
    // b restarts supporting sticky only: the protocol must change, so the group rebalances.
    let b = Consumer { member_id: String::new(), protocols: vec![protocol("sticky", "y")], ..consumers[1].clone() };
    let h = co.join(&b.join_req());
    assert!(!co.is_answered(h));
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
    let a = co.join(&consumers[0].join_req());
    let answer = co.must_join_answer(a).unwrap();
    assert_eq!(answer.protocol_name, "sticky");
    assert_eq!(co.must_join_answer(h).unwrap().generation, 2);
}

#[test]
fn a_new_leader_serves_the_stored_generation_also_after_a_snapshot_restore() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::dynamic("a"), Consumer::dynamic("b")];
    let leader = co.stable_group(&mut consumers);
    co.advance(5_000);

    tracing::info!("--- the leader changes: a new engine from the applied records");
    co.fail_over();
    let d = co.describe();
    assert_eq!(
        (d.state, d.generation, d.leader.as_str(), d.members.len()),
        (ClassicState::Stable, 1, leader.as_str(), 2)
    );
    for c in &consumers {
        co.heartbeat(c).unwrap();
    }
    co.engine.check_commit(GROUP, &consumers[0].member_id, None, 1).unwrap();
    let h = co.sync(&consumers[1].sync_req(Vec::new()));
    assert_eq!(co.must_sync_answer(h).unwrap().assignment, assignment_of(&consumers[1].member_id, 1));

    tracing::info!("--- every session starts in full on the new leader");
    co.advance(SESSION_MS - 1);
    co.heartbeat(&consumers[0]).unwrap();
    co.advance(1);
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance, "b was not heard from for a whole session");

    tracing::info!("--- a replica restored from a snapshot has the same records");
    let snapshot = co.machine.snapshot().unwrap();
    let mut restored = OffsetsMachine::new();
    restored.restore(&snapshot).unwrap();
    assert_eq!(restored.classic_groups(), co.machine.classic_groups());
    let mut engine = ClassicEngine::new(ClassicConfig::default(), restored.classic_groups(), co.now, counting_ids());
    let d = engine.describe(GROUP, restored.classic_groups()).unwrap();
    assert_eq!((d.state, d.generation), (ClassicState::Stable, 1));
    engine.heartbeat(co.now, restored.replicated(), &consumers[1].heartbeat_req()).unwrap();
}

#[test]
fn the_protocol_is_the_one_most_members_prefer_among_those_all_support() {
    let mut co = Coordinator::new();
    let mut consumers = [Consumer::dynamic("a"), Consumer::dynamic("b"), Consumer::dynamic("c")];
    consumers[0].protocols = vec![protocol("roundrobin", "a-rr"), protocol("sticky", "a-st"), protocol("range", "a-r")];
    consumers[1].protocols = vec![protocol("sticky", "b-st"), protocol("range", "b-r")];
    consumers[2].protocols = vec![protocol("range", "c-r"), protocol("sticky", "c-st")];
    // roundrobin is a's first choice but b and c lack it: a votes sticky, b sticky, c range.
    let handles: Vec<Handle> = consumers.iter_mut().map(|c| co.join_new(c)).collect();
    co.wait_for_initial_rebalance(&handles);
    let answers: Vec<JoinAnswer> = consumers.iter_mut().zip(handles).map(|(c, h)| co.must_join(c, h)).collect();
    assert!(answers.iter().all(|a| a.protocol_name == "sticky"));
    let leader = answers.iter().find(|a| !a.members.is_empty()).unwrap();
    let metadata: Vec<&[u8]> = leader.members.iter().map(|m| m.metadata.as_ref()).collect();
    assert_eq!(metadata, [b"a-st".as_ref(), b"b-st", b"c-st"], "each member's metadata for sticky");
}

#[test]
fn inconsistent_protocols_are_refused_in_every_direction() {
    let mut co = Coordinator::new();
    let refused = |co: &mut Coordinator, c: &Consumer| {
        let h = co.join(&c.join_req());
        matches!(co.must_join_answer(h), Err(CoordinatorError::InconsistentGroupProtocol { .. }))
    };
    assert!(refused(&mut co, &Consumer { protocol_type: String::new(), ..Consumer::dynamic("x") }), "no protocol type");
    assert!(refused(&mut co, &Consumer { protocols: Vec::new(), ..Consumer::dynamic("x") }), "no protocols");

    let mut consumers = vec![Consumer::dynamic("a")];
    co.stable_group(&mut consumers);
    assert!(refused(&mut co, &Consumer { protocol_type: "connect".into(), ..Consumer::dynamic("x") }));
    assert!(refused(&mut co, &Consumer { protocols: vec![protocol("sticky", "")], ..Consumer::dynamic("x") }));
    let mut wrong = consumers[0].sync_req(Vec::new());
    wrong.protocol_name = Some("sticky".into());
    let h = co.sync(&wrong);
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::InconsistentGroupProtocol { .. })));

    tracing::info!("--- a classic group with members keeps its id from KIP-848 members");
    let member = Member { member_id: "k".into(), subscribed: ["t".to_string()].into(), ..Default::default() };
    let change = pb::ConsumerGroupChange {
        group_id: GROUP.into(),
        expect_version: 0,
        meta: Some(ConsumerGroup { group_id: GROUP.into(), ..Default::default() }.meta_to_proto()),
        upsert_members: vec![member_to_proto(&member)],
        ..Default::default()
    };
    let kip848 =
        |c: pb::ConsumerGroupChange| pb::OffsetsCommand { command: Some(pb::offsets_command::Command::GroupChange(c)) };
    assert_eq!(co.apply(kip848(change.clone())).as_ref(), CONFLICT);
    assert!(co.machine.groups().is_empty());

    tracing::info!("--- once it is empty, a KIP-848 group takes the id over, and keeps it from classic members");
    co.leave(vec![consumers[0].leaving()]);
    assert!(!co.stored().has_members());
    assert_eq!(co.apply(kip848(change)).as_ref(), APPLIED);
    assert!(co.machine.classic_groups().get(GROUP).is_none(), "the empty classic record is gone");
    assert!(refused(&mut co, &Consumer::dynamic("x")));
    assert_eq!(
        check_delete_group(co.machine.state(), co.machine.groups(), co.machine.classic_groups(), GROUP),
        Err(CoordinatorError::GroupNotEmpty { group_id: GROUP.into(), members: 1 })
    );
    // A classic record decided before the KIP-848 member joined does not apply over it.
    let record = pb::ClassicGroupRecord {
        expect_version: 0,
        group: Some(
            ClassicGroup {
                group_id: GROUP.into(),
                members: [("m".to_string(), ClassicMember::default())].into(),
                ..Default::default()
            }
            .to_proto(),
        ),
    };
    let answer = co.apply(pb::OffsetsCommand { command: Some(pb::offsets_command::Command::ClassicGroup(record)) });
    assert!(matches!(applied(GROUP, &answer), Err(CoordinatorError::InconsistentGroupProtocol { .. })));
}

#[test]
fn a_failed_persist_fails_the_syncs_and_the_group_rebalances() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    let mut b = Consumer::dynamic("b");
    let (ha, hb) = (co.join_new(&mut a), co.join_new(&mut b));
    co.wait_for_initial_rebalance(&[ha, hb]);
    co.must_join(&mut a, ha);
    co.must_join(&mut b, hb);
    co.hold_persists = true;
    let b_sync = co.sync(&b.sync_req(Vec::new()));
    let a_sync = co.sync(&a.sync_req(vec![(b.member_id.clone(), assignment_of(&b.member_id, 1))]));
    let persist = co.held.pop().unwrap();
    assert!(!co.is_answered(a_sync) && !co.is_answered(b_sync));
    co.fail(persist, CoordinatorError::Timeout { waited_ms: 5_000, what: "commit" });
    for h in [a_sync, b_sync] {
        assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::NotAvailable(_))), "COORDINATOR_NOT_AVAILABLE");
    }
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
    assert!(co.machine.classic_groups().is_empty(), "nothing was stored");

    tracing::info!("--- both rejoin; the next assignment is stored and handed out");
    co.hold_persists = false;
    let (ha, hb) = (co.join(&a.join_req()), co.join(&b.join_req()));
    co.must_join(&mut a, ha);
    co.must_join(&mut b, hb);
    assert_eq!(a.generation, 2);
    let leader = a.member_id.clone();
    co.sync_all(&mut [a, b], &leader);

    tracing::info!("--- a record that lost its compare-and-set is a failed persist too");
    let mut consumers = [Consumer::dynamic("c")];
    let mut co = Coordinator::new();
    let h = co.join_new(&mut consumers[0]);
    co.advance(INITIAL_REBALANCE_DELAY_MS);
    co.must_join(&mut consumers[0], h);
    co.hold_persists = true;
    let h = co.sync(&consumers[0].sync_req(Vec::new()));
    let persist = co.held.pop().unwrap();
    let other = pb::ClassicGroupRecord {
        expect_version: 0,
        group: Some(ClassicGroup { group_id: GROUP.into(), ..Default::default() }.to_proto()),
    };
    co.apply(pb::OffsetsCommand { command: Some(pb::offsets_command::Command::ClassicGroup(other)) });
    co.store(persist);
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::NotAvailable(_))));
}

#[test]
fn requests_are_validated_like_kafkas_coordinator_does() {
    let mut co = Coordinator::with_config(ClassicConfig { max_size: 2, ..ClassicConfig::default() });
    let c = Consumer::dynamic("x");
    let mut bad = c.join_req();
    bad.group_id.clear();
    let h = co.join(&bad);
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::InvalidGroupId(_))));
    for session_timeout_ms in [5_999, 1_800_001] {
        let h = co.join(&JoinGroup { session_timeout_ms, ..c.join_req() });
        assert!(matches!(
            co.must_join_answer(h),
            Err(CoordinatorError::InvalidSessionTimeout { min_ms: 6_000, max_ms: 1_800_000, .. })
        ));
    }
    let h = co.join(&JoinGroup { instance_id: Some(String::new()), ..c.join_req() });
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::InvalidRequest(_))));
    let h = co.sync(&SyncGroup::default());
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::InvalidGroupId(_))));
    assert!(matches!(
        co.engine.heartbeat(0, co.machine.replicated(), &Heartbeat::default()),
        Err(CoordinatorError::InvalidGroupId(_))
    ));

    tracing::info!("--- the group size limit");
    let mut consumers = vec![Consumer::dynamic("a"), Consumer::dynamic("b")];
    co.stable_group(&mut consumers);
    let h = co.join(&Consumer::dynamic("c").join_req());
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::GroupMaxSizeReached { max: 2, .. })));
    assert_eq!(co.describe().state, ClassicState::Stable);

    tracing::info!("--- JoinGroup v0-v3: a new member joins without the member id round");
    let mut co = Coordinator::new();
    let h = co.join(&JoinGroup { legacy_member_id: true, ..Consumer::dynamic("old").join_req() });
    co.advance(INITIAL_REBALANCE_DELAY_MS);
    assert_eq!(co.must_join_answer(h).unwrap().member_id, "old-1");
}

#[test]
fn member_ids_handed_out_expire_unused_after_the_session_timeout() {
    let mut co = Coordinator::new();
    let mut c = Consumer::dynamic("a");
    let first = co.join(&c.join_req());
    let Err(CoordinatorError::MemberIdRequired { member_id, .. }) = co.must_join_answer(first) else { panic!() };
    c.member_id = member_id;
    assert_eq!(co.engine.next_deadline(), Some(i64::from(SESSION_MS)));
    co.advance(SESSION_MS);
    assert!(co.engine.describe(GROUP, co.machine.classic_groups()).is_none(), "forgotten");
    let h = co.join(&c.join_req());
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::UnknownMemberId { .. })));
}

#[test]
fn a_leader_that_resigns_answers_every_parked_request() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    let h = co.join_new(&mut a);
    let not_coordinator = CoordinatorError::NotCoordinator { node: 1, leader: Some(2), addr: None };
    let effects = co.engine.resign(&not_coordinator);
    assert_eq!(effects, [Effect::Respond(h, Answer::Join(Err(not_coordinator)))]);
    assert!(co.engine.next_deadline().is_none());
}

#[test]
fn stale_deadlines_do_nothing() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::dynamic("a")];
    co.stable_group(&mut consumers);
    // Every heartbeat re-arms the session: the earlier deadlines are stale and skipped.
    for _ in 0..20 {
        co.advance(1_000);
        co.heartbeat(&consumers[0]).unwrap();
    }
    assert_eq!(co.engine.next_deadline(), Some(co.now + i64::from(SESSION_MS)));
    let effects = co.engine.tick(co.now, co.machine.replicated());
    assert!(effects.is_empty());
    assert_eq!(co.describe().state, ClassicState::Stable);
}

#[test]
fn a_static_member_restarting_during_a_rebalance_takes_its_predecessors_place() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::with_instance("a", "instance-a"), Consumer::with_instance("b", "instance-b")];
    co.stable_group(&mut consumers);
    let [mut a, mut old_b] = <[Consumer; 2]>::try_from(consumers).unwrap();

    tracing::info!("--- a rebalance: both rejoin, generation 2; b's process syncs and waits");
    let a_join = co.join(&a.join_req());
    let old_b_join = co.join(&old_b.join_req());
    co.must_join(&mut a, a_join);
    co.must_join(&mut old_b, old_b_join);
    assert_eq!((a.generation, old_b.generation), (2, 2));
    let leader = co.describe().leader;
    assert_eq!(leader, a.member_id);
    let parked = co.sync(&old_b.sync_req(Vec::new()));
    assert!(!co.is_answered(parked), "b's process waits for its assignment");

    tracing::info!("--- b's process is replaced by a new one with the same instance id");

    let mut b = Consumer { member_id: String::new(), ..old_b.clone() };
    let b_join = co.join(&b.join_req());
    assert!(
        matches!(co.must_sync_answer(parked), Err(CoordinatorError::FencedInstanceId { .. })),
        "the old process is fenced at once"
    );
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance, "the leader may have been sent the old id");
    let a_join = co.join(&a.join_req());
    co.must_join(&mut a, a_join);
    let answer = co.must_join(&mut b, b_join);
    assert_eq!(answer.generation, 3);
    let ids: Vec<String> = co.describe().members.into_iter().map(|m| m.member_id).collect();
    assert_eq!(ids, [a.member_id.clone(), b.member_id.clone()]);
    co.sync_all(&mut [a, b], &leader);
}

#[test]
fn a_join_phase_waits_for_member_ids_handed_out() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    co.stable_group(std::slice::from_mut(&mut a));
    let started = co.now;

    tracing::info!("--- b is given an id; a rejoins; the phase waits for b to use its id");
    let mut b = Consumer::dynamic("b");
    let first = co.join(&b.join_req());
    let Err(CoordinatorError::MemberIdRequired { member_id, .. }) = co.must_join_answer(first) else { panic!() };
    b.member_id = member_id;
    let leader_join = co.join(&a.join_req());
    assert!(!co.is_answered(leader_join), "b's id is not used yet");

    tracing::info!("--- b's id expires unused after its session timeout: the phase ends without it");
    co.advance(SESSION_MS);
    assert_eq!(co.now, started + i64::from(SESSION_MS));
    let answer = co.must_join(&mut a, leader_join);
    assert_eq!((answer.generation, answer.members.len()), (2, 1));
}

#[test]
fn a_group_whose_emptying_was_not_stored_stays_empty_on_its_leader() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    co.stable_group(std::slice::from_mut(&mut a));
    co.hold_persists = true;
    co.leave(vec![a.leaving()]);
    let persist = co.held.pop().expect("the empty group is persisted");
    co.fail(persist, CoordinatorError::Timeout { waited_ms: 5_000, what: "commit" });
    assert!(co.stored().has_members(), "the record still lists a");
    let d = co.describe();
    assert_eq!((d.state, d.generation), (ClassicState::Empty, 2), "the leader keeps what it knows");
    assert!(matches!(co.heartbeat(&a), Err(CoordinatorError::UnknownMemberId { .. })));
    assert_eq!(co.describe().state, ClassicState::Empty);
}

#[test]
fn a_hundred_thousand_heartbeats_leave_the_deadline_queue_small() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::dynamic("a"), Consumer::dynamic("b")];
    co.stable_group(&mut consumers);
    let [a, b] = <[Consumer; 2]>::try_from(consumers).unwrap();

    tracing::info!("--- b heartbeats as usual; a spams 100 heartbeats a millisecond for a second");
    co.heartbeat(&b).unwrap();
    for _ in 0..1_000 {
        for _ in 0..100 {
            co.heartbeat(&a).unwrap();
            // A server asks for the next deadline after every call.
            co.engine.next_deadline();
        }
        co.advance(1);
    }
    // A session per member, and the group's sync deadline left from its generation.
    assert!(co.engine.queued_deadlines() <= 3, "{} deadlines queued", co.engine.queued_deadlines());

    tracing::info!("--- the sessions still run: b, silent since, goes 10 s after its heartbeat");
    let b_heard = co.now - 1_000;
    co.advance_to(b_heard + i64::from(SESSION_MS) - 1);
    co.heartbeat(&a).unwrap();
    assert_eq!(co.describe().state, ClassicState::Stable);
    co.advance(1);
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
    assert!(matches!(co.heartbeat(&b), Err(CoordinatorError::UnknownMemberId { .. })));
}

#[test]
fn member_ids_handed_out_count_against_the_group_size() {
    let mut co = Coordinator::with_config(ClassicConfig { max_size: 3, ..ClassicConfig::default() });
    let mut a = Consumer::dynamic("a");
    co.stable_group(std::slice::from_mut(&mut a));

    tracing::info!("--- 100,000 JoinGroups without a member id: two ids are handed out, then no more");
    let spammer = Consumer::dynamic("spam");
    let mut ids = Vec::new();
    for _ in 0..100_000 {
        let h = co.join(&spammer.join_req());
        match co.must_join_answer(h) {
            Err(CoordinatorError::MemberIdRequired { member_id, .. }) => ids.push(member_id),
            Err(CoordinatorError::GroupMaxSizeReached { max: 3, .. }) => {}
            other => panic!("unexpected answer {other:?}"),
        }
        co.engine.next_deadline();
    }
    assert_eq!(ids, ["spam-2", "spam-3"], "a member and two ids make three");
    assert_eq!(co.describe().pending_members, 2);
    assert!(co.engine.queued_deadlines() <= 4, "{} deadlines queued", co.engine.queued_deadlines());
    assert_eq!(co.describe().state, ClassicState::Stable);

    tracing::info!("--- an id handed out still joins; once they expire, ids are handed out again");
    let mut b = Consumer { member_id: ids[0].clone(), ..Consumer::dynamic("b") };
    let b_join = co.join(&b.join_req());
    let a_join = co.join(&a.join_req());
    assert!(!co.is_answered(b_join), "the phase waits for the other id handed out");
    co.advance(SESSION_MS);
    assert_eq!(co.must_join(&mut b, b_join).generation, 2);
    co.must_join(&mut a, a_join);
    assert_eq!(co.describe().pending_members, 0);
    let h = co.join(&spammer.join_req());
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::MemberIdRequired { .. })));
}

#[test]
fn storing_that_the_group_became_empty_is_retried_until_it_is_stored() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    co.stable_group(std::slice::from_mut(&mut a));
    let standalone_commit = |co: &Coordinator| {
        let m = &co.machine;
        check_commit(m.groups(), m.classic_groups(), GROUP, Committer::Standalone, std::iter::empty())
    };

    tracing::info!("--- a leaves; storing the empty group fails, twice");
    co.hold_persists = true;
    co.leave(vec![a.leaving()]);
    let persist = co.held.pop().expect("the empty group is persisted");
    co.fail(persist, CoordinatorError::Timeout { waited_ms: 5_000, what: "commit" });
    assert!(co.stored().has_members(), "the record still lists a");
    assert!(standalone_commit(&co).is_err());
    assert!(check_delete_group(co.machine.state(), co.machine.groups(), co.machine.classic_groups(), GROUP).is_err());
    co.advance(EMPTY_PERSIST_RETRY_MS - 1);
    assert!(co.held.is_empty());
    co.advance(1);
    let persist = co.held.pop().expect("stored again");
    assert_eq!(persist.record.group.as_ref().map(|g| (g.generation, g.members.len())), Some((2, 0)));
    co.fail(persist, CoordinatorError::NotAvailable("a lost proposal".into()));

    tracing::info!("--- the third attempt is stored: commits without a member and DeleteGroup pass");
    co.hold_persists = false;
    co.advance(EMPTY_PERSIST_RETRY_MS);
    let stored = co.stored();
    assert_eq!((stored.generation, stored.members.len()), (2, 0));
    standalone_commit(&co).unwrap();
    check_delete_group(co.machine.state(), co.machine.groups(), co.machine.classic_groups(), GROUP).unwrap();
    assert!(co.engine.next_deadline().is_none(), "nothing more to retry");
    assert!(co.engine.describe(GROUP, &ClassicGroups::default()).is_none(), "nothing kept in memory");
}

#[test]
fn a_restarted_static_members_session_runs_again_once_its_new_id_is_stored() {
    let mut co = Coordinator::new();
    let mut consumers = vec![Consumer::with_instance("a", "instance-a"), Consumer::with_instance("b", "instance-b")];
    co.stable_group(&mut consumers);
    let [a, old_b] = <[Consumer; 2]>::try_from(consumers).unwrap();

    tracing::info!("--- b restarts; storing its new id takes longer than its session");
    let mut b = Consumer { member_id: String::new(), ..old_b };
    co.hold_persists = true;
    let h = co.join(&b.join_req());
    for _ in 0..4 {
        co.advance(3_000);
        co.heartbeat(&a).unwrap();
    }
    assert_eq!(co.describe().members.len(), 2, "a parked member needs no heartbeat");
    let persist = co.held.pop().expect("the new id is persisted");
    co.hold_persists = false;
    co.store(persist);
    co.must_join(&mut b, h);
    let answered = co.now;

    tracing::info!("--- b never heartbeats after its answer: its session ends a session timeout later");
    co.advance_to(answered + i64::from(SESSION_MS) - 1);
    co.heartbeat(&a).unwrap();
    assert_eq!(co.describe().state, ClassicState::Stable);
    co.advance(1);
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance, "b's session ran out");
    assert!(matches!(co.heartbeat(&b), Err(CoordinatorError::UnknownMemberId { .. })));
}

#[test]
fn the_initial_join_phase_ends_only_by_its_timer() {
    let config = ClassicConfig { initial_rebalance_delay_ms: 20_000, ..ClassicConfig::default() };

    tracing::info!("--- an id handed out expires during the initial delay: the phase goes on");
    let mut co = Coordinator::with_config(config);
    let b = Consumer::dynamic("b");
    let first = co.join(&b.join_req());
    assert!(matches!(co.must_join_answer(first), Err(CoordinatorError::MemberIdRequired { .. })));
    let mut a = Consumer::dynamic("a");
    let a_join = co.join_new(&mut a);
    co.advance_to(i64::from(SESSION_MS));
    assert_eq!(co.describe().pending_members, 0, "b's id expired");
    assert!(!co.is_answered(a_join), "the initial phase lasts its delay");
    co.advance_to(19_999);
    assert!(!co.is_answered(a_join));
    co.advance_to(20_000);
    assert_eq!(co.must_join(&mut a, a_join).generation, 1);

    tracing::info!("--- a new member dropped during the initial delay: the phase goes on too");
    let mut co = Coordinator::with_config(ClassicConfig { new_member_join_timeout_ms: 10_000, ..config });
    let mut a = Consumer::dynamic("a");
    let a_join = co.join_new(&mut a);
    co.advance_to(5_000);
    let mut b = Consumer::dynamic("b");
    let b_join = co.join_new(&mut b);
    co.advance_to(10_000);
    assert!(matches!(co.must_join_answer(a_join), Err(CoordinatorError::UnknownMemberId { .. })), "a timed out");
    assert!(!co.is_answered(b_join), "b is the only one left, and the phase still waits");
    assert_eq!(co.describe().state, ClassicState::PreparingRebalance);
}

#[test]
fn rebalance_timeouts_below_the_minimum_are_refused() {
    let mut co = Coordinator::new();
    let c = Consumer::dynamic("x");
    for rebalance_timeout_ms in [0, MIN_REBALANCE_TIMEOUT_MS - 1] {
        let h = co.join(&JoinGroup { rebalance_timeout_ms, ..c.join_req() });
        match co.must_join_answer(h) {
            Err(CoordinatorError::InvalidRequest(why)) => assert!(why.contains("rebalance timeout"), "{why}"),
            other => panic!("{rebalance_timeout_ms} ms: expected INVALID_REQUEST, got {other:?}"),
        }
    }
    assert!(co.engine.describe(GROUP, co.machine.classic_groups()).is_none(), "nothing was kept");
    let h = co.join(&JoinGroup { rebalance_timeout_ms: MIN_REBALANCE_TIMEOUT_MS, ..c.join_req() });
    assert!(matches!(co.must_join_answer(h), Err(CoordinatorError::MemberIdRequired { .. })));
}

#[test]
fn metadata_assignments_and_the_stored_record_are_bounded() {
    let mut co = Coordinator::new();
    let refusal = |co: &mut Coordinator, c: &Consumer| {
        let h = co.join(&c.join_req());
        co.must_join_answer(h)
    };

    tracing::info!("--- a protocol's metadata, and a member's protocols together");
    let mib = Bytes::from(vec![7u8; MAX_PROTOCOL_METADATA_BYTES]);
    let over = Bytes::from(vec![7u8; MAX_PROTOCOL_METADATA_BYTES + 1]);
    let too_big =
        Consumer { protocols: vec![Protocol { name: "range".into(), metadata: over }], ..Consumer::dynamic("x") };
    assert!(matches!(refusal(&mut co, &too_big), Err(CoordinatorError::InvalidRequest(_))));
    let three = ["range", "sticky", "roundrobin"].map(|name| Protocol { name: name.into(), metadata: mib.clone() });
    let too_many = Consumer { protocols: three.to_vec(), ..Consumer::dynamic("x") };
    assert!(matches!(refusal(&mut co, &too_many), Err(CoordinatorError::InvalidRequest(_))));
    let at_limit =
        Consumer { protocols: vec![Protocol { name: "range".into(), metadata: mib }], ..Consumer::dynamic("x") };
    assert!(matches!(refusal(&mut co, &at_limit), Err(CoordinatorError::MemberIdRequired { .. })));
    co.leave(vec![Leaving { member_id: "x-1".into(), instance_id: None }]);

    tracing::info!("--- members join until the stored record has no room for another's metadata");
    let almost = Bytes::from(vec![7u8; MAX_PROTOCOL_METADATA_BYTES - 4_096]);
    let big = |name: &str| Consumer {
        protocols: vec![
            Protocol { name: "range".into(), metadata: almost.clone() },
            Protocol { name: "sticky".into(), metadata: almost.clone() },
        ],
        ..Consumer::dynamic(name)
    };
    let mut consumers = Vec::new();
    let mut handles = Vec::new();
    for i in 0..20 {
        let mut c = big(&format!("c{i}"));
        let first = co.join(&c.join_req());
        match co.must_join_answer(first) {
            Err(CoordinatorError::MemberIdRequired { member_id, .. }) => c.member_id = member_id,
            Err(CoordinatorError::InvalidRequest(why)) => {
                assert!(why.contains("no room"), "{why}");
                break;
            }
            other => panic!("unexpected answer {other:?}"),
        }
        handles.push(co.join(&c.join_req()));
        consumers.push(c);
    }
    let per_member = 2 * almost.len();
    assert_eq!(consumers.len(), MAX_GROUP_MEMBERS_BYTES / per_member, "as many as fit");
    co.wait_for_initial_rebalance(&handles);
    let mut leader = None;
    for (c, h) in consumers.iter_mut().zip(&handles) {
        let answer = co.must_join(c, *h);
        if !answer.members.is_empty() {
            leader = Some(c.clone());
        }
    }
    let leader = leader.expect("a leader");

    tracing::info!("--- the leader's assignments: each, and together");
    let one_over = Bytes::from(vec![1u8; MAX_ASSIGNMENT_BYTES + 1]);
    let h = co.sync(&leader.sync_req(vec![(leader.member_id.clone(), one_over)]));
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::InvalidRequest(_))));
    let full = Bytes::from(vec![1u8; MAX_ASSIGNMENT_BYTES]);
    let n = MAX_SYNC_ASSIGNMENTS_BYTES / MAX_ASSIGNMENT_BYTES + 1;
    let too_much: Vec<(String, Bytes)> = (0..n).map(|i| (format!("m{i}"), full.clone())).collect();
    let h = co.sync(&leader.sync_req(too_much));
    assert!(matches!(co.must_sync_answer(h), Err(CoordinatorError::InvalidRequest(_))));
    assert!(co.machine.classic_groups().get(GROUP).is_none(), "nothing stored");
    assert_eq!(co.describe().state, ClassicState::CompletingRebalance, "the leader may sync again");

    tracing::info!("--- the largest assignments allowed fit the stored record with every member");
    let handles: Vec<Handle> = consumers
        .iter()
        .filter(|c| c.member_id != leader.member_id)
        .map(|c| co.sync(&c.sync_req(Vec::new())))
        .collect();
    co.hold_persists = true;
    let all = consumers.iter().map(|c| (c.member_id.clone(), full.clone())).collect();
    let h = co.sync(&leader.sync_req(all));
    let persist = co.held.pop().expect("the assignments are persisted");
    let record_bytes = persist.record.group.as_ref().map_or(0, |g| g.encoded_len());
    assert!(record_bytes > MAX_GROUP_MEMBERS_BYTES && record_bytes <= MAX_GROUP_RECORD_BYTES, "{record_bytes}");
    co.store(persist);
    for h in handles.into_iter().chain([h]) {
        assert_eq!(co.must_sync_answer(h).unwrap().assignment.len(), MAX_ASSIGNMENT_BYTES);
    }
}

#[test]
fn a_second_leader_sync_while_its_assignment_is_stored_is_not_stored_again() {
    let mut co = Coordinator::new();
    let mut a = Consumer::dynamic("a");
    let mut b = Consumer::dynamic("b");
    let (ha, hb) = (co.join_new(&mut a), co.join_new(&mut b));
    co.wait_for_initial_rebalance(&[ha, hb]);
    assert_eq!(co.must_join(&mut a, ha).leader, a.member_id);
    co.must_join(&mut b, hb);

    tracing::info!("--- the leader syncs, and again with other assignments before the first is stored");
    co.hold_persists = true;
    let b_sync = co.sync(&b.sync_req(Vec::new()));
    let first = vec![(a.member_id.clone(), Bytes::from("a: 0")), (b.member_id.clone(), Bytes::from("b: 1"))];
    let a_first = co.sync(&a.sync_req(first));
    let second = vec![(a.member_id.clone(), Bytes::from("a: 0, 1")), (b.member_id.clone(), Bytes::new())];
    let a_second = co.sync(&a.sync_req(second));
    assert_eq!(co.held.len(), 1, "the second assignment is not stored");
    assert!(
        matches!(co.must_sync_answer(a_first), Err(CoordinatorError::RebalanceInProgress { .. })),
        "the superseded SyncGroup is answered"
    );

    tracing::info!("--- the first assignment is stored: everyone gets it");
    let persist = co.held.pop().unwrap();
    co.hold_persists = false;
    co.store(persist);
    assert_eq!(co.must_sync(&mut a, a_second).assignment, Bytes::from("a: 0"));
    assert_eq!(co.must_sync(&mut b, b_sync).assignment, Bytes::from("b: 1"));
    assert_eq!(co.stored().members[&b.member_id].assignment, Bytes::from("b: 1"));
    assert_eq!(co.stored().version, 1);
    assert_eq!(co.describe().state, ClassicState::Stable);
}
