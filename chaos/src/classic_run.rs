//! Classic consumer groups under faults: members speaking Kafka's classic protocol (JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup; eager: every member gives up everything to rejoin), their
//! checkers, and the generated `classic_groups` scenario.
//!
//! ```text
//!  producer (1 record per partition every 100 ms, acks=all)
//!  members on their own client hosts: join ─► the leader assigns ranges ─► sync ─► fetch, hand
//!      out, commit under the generation; heartbeat every second; REBALANCE_IN_PROGRESS: commit,
//!      rejoin. Schedule from the seed: join, crash mid-batch, leave, pause (some past the session)
//!  node faults from the seed (faults::inject): coordinator leaders move
//!  heal ─► producer stops ─► the group settles with lag 0 ─► checkers
//! ```
//!
//! A member hands out what it fetched only while its membership is surely alive: less than the
//! session timeout (shorter than its rebalance timeout) since it sent the last heartbeat or sync
//! the coordinator accepted. The coordinator cannot have removed it before then — not for its
//! session, which restarted when that request arrived, nor for missing a join phase, which
//! began after that request was answered without one and gives it the rebalance timeout. A
//! member past that stops and rejoins. (Kafka's consumer, in the same position, may keep handing
//! out records until its next heartbeat fails; its guarantee is that commits are fenced by
//! generation.) So the members that hand out one partition do it in generation order.
//!
//! Checkers: [`group_ownership::classic_double_owners`] (what each generation handed out:
//! client-visible, and each stored record: white-box; no partition handed to two members of one
//! generation), committed offsets never going back ([`group_ownership::CommitWatch`]),
//! [`group_delivery::epoch_order`] with generations for epochs, [`group_delivery::skipped`]
//! (at least once) and [`group_delivery::lagging`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rill_client::{Client, TopicPartition};
use rill_proto::common::ErrorCode;
use rill_proto::groups::{
    GroupHeartbeatRequest, GroupProtocol, JoinGroupRequest, LeaveGroupRequest, LeavingMember, MemberAssignment,
    SyncGroupRequest,
};
use rill_server::node::Hosted;

use crate::checkers::group_delivery::{self, Delivery};
use crate::checkers::group_ownership::{self, CommitWatch, Handout};
use crate::checkers::Violation;
use crate::cluster::{connect, SimCluster};
use crate::faults;
use crate::group_run::{high_watermarks, member_schedule, producer, Schedule, CRASH, LEAVE, RUN};
use crate::run::{Report, LIVENESS_BOUND};
use crate::scenarios::ALL_FAULTS;

/// The classic group every member joins.
pub const GROUP: &str = "classic";
/// Partitions of the group's topic (the same producer as the `groups` scenario's).
const PARTITIONS: u32 = crate::group_run::PARTITIONS;
/// Client hosts a member may run on (host 0 is the admin's, the last the producer's).
const MEMBER_HOSTS: usize = crate::group_run::MEMBER_HOSTS;
/// The generated scenario's fault phase (ten times longer with `RILL_SIM_LONG`).
const FAULT_PHASE: Duration = Duration::from_secs(30);
/// The members' session timeout: the shortest the coordinator accepts.
const SESSION: Duration = Duration::from_secs(6);
/// The members' rebalance timeout: how long a join or sync phase waits for them.
const REBALANCE: Duration = Duration::from_secs(10);
/// How often a member heartbeats.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long a JoinGroup or SyncGroup may wait for its answer: a join phase lasts up to the
/// rebalance timeout (a new group's first one the initial delay more).
const PARKED_WAIT: Duration = Duration::from_secs(15);
/// The assignor every member names (the leader computes ranges).
const PROTOCOL: &str = "range";

/// What the members did, each list in the order it happened.
#[derive(Debug, Default)]
pub struct Log {
    /// Every assignment a sync handed a member.
    pub handouts: Vec<Handout>,
    /// Every record handed to the application, with the member's generation.
    pub polled: Vec<Delivery>,
    /// Every record the application finished.
    pub processed: Vec<Delivery>,
}

/// The members' shared [`Log`].
pub type Shared = Arc<Mutex<Log>>;

/// A member's assignment, as the leader encodes it: partition numbers, 4 bytes big-endian each.
fn encode(partitions: &[u32]) -> Bytes {
    partitions.iter().flat_map(|p| p.to_be_bytes()).collect::<Vec<u8>>().into()
}

/// [`encode`]'s inverse (a trailing partial number is ignored).
pub fn decode(assignment: &[u8]) -> Vec<u32> {
    assignment.chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// The leader's range assignment: members by id, each a contiguous range of partitions.
fn ranges(members: &[String]) -> Vec<MemberAssignment> {
    let mut ids: Vec<&String> = members.iter().collect();
    ids.sort();
    let n = ids.len().max(1) as u32;
    let (per, extra) = (PARTITIONS / n, PARTITIONS % n);
    let mut next = 0;
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| {
            let count = per + u32::from((i as u32) < extra);
            let partitions: Vec<u32> = (next..next + count).collect();
            next += count;
            MemberAssignment { member_id: id.clone(), assignment: encode(&partitions) }
        })
        .collect()
}

/// How a membership ended.
enum Ended {
    /// The member must join again (a rebalance, its generation gone, its lease run out).
    Rejoin,
    /// Its id is unknown to the group: join again as a new member.
    Forgotten,
    /// Its control word says stop.
    Stopped,
}

/// One classic member of [`GROUP`] on `topic`: joins, syncs, then fetches its partitions, hands
/// records out one by one (a millisecond of work each) and commits after each batch under its
/// generation, heartbeating every second; rejoins on a rebalance. `ctl` makes it crash (stop at
/// once, mid-batch) or leave (commit, leave the group).
pub async fn member(bootstrap: Vec<String>, id: usize, topic: &'static str, ctl: Arc<AtomicU8>, log: Shared) {
    let client = connect(bootstrap).await;
    let mut member_id = String::new();
    loop {
        if ctl.load(Ordering::SeqCst) != RUN {
            return;
        }
        let join = JoinGroupRequest {
            group_id: GROUP.into(),
            member_id: member_id.clone(),
            instance_id: None,
            protocol_type: "consumer".into(),
            protocols: vec![GroupProtocol { name: PROTOCOL.into(), metadata: Bytes::from_static(topic.as_bytes()) }],
            session_timeout_ms: SESSION.as_millis() as u32,
            rebalance_timeout_ms: REBALANCE.as_millis() as u32,
            client_id: format!("member-{id}"),
        };
        let Ok(joined) = client.join_group(join, PARKED_WAIT).await else { continue };
        match ErrorCode::try_from(joined.error_code) {
            Ok(ErrorCode::None) => {}
            Ok(ErrorCode::MemberIdRequired) => {
                member_id = joined.member_id;
                continue;
            }
            Ok(ErrorCode::UnknownMemberId) => {
                member_id.clear();
                continue;
            }
            _ => {
                rill_rt::sleep(Duration::from_millis(100)).await;
                continue;
            }
        }
        member_id = joined.member_id.clone();
        let generation = joined.generation_id;
        let assignments = if joined.leader == member_id {
            ranges(&joined.members.iter().map(|m| m.member_id.clone()).collect::<Vec<_>>())
        } else {
            Vec::new()
        };
        let sync = SyncGroupRequest {
            group_id: GROUP.into(),
            member_id: member_id.clone(),
            instance_id: None,
            generation_id: generation,
            protocol_type: Some("consumer".into()),
            protocol_name: Some(PROTOCOL.into()),
            assignments,
        };
        // The lease starts when the request the coordinator accepted was sent.
        let sent = rill_rt::now();
        let Ok(synced) = client.sync_group(sync, PARKED_WAIT).await else { continue };
        match ErrorCode::try_from(synced.error_code) {
            Ok(ErrorCode::None) => {}
            Ok(ErrorCode::UnknownMemberId) => {
                member_id.clear();
                continue;
            }
            _ => continue,
        }
        let partitions = decode(&synced.assignment);
        log.lock().unwrap().handouts.push(Handout { member: id, generation, partitions: partitions.clone() });
        let owned = Owned { client: &client, topic, member_id: &member_id, generation, partitions, id };
        match owned.consume(sent, &ctl, &log).await {
            Ended::Rejoin => {}
            Ended::Forgotten => member_id.clear(),
            Ended::Stopped => {
                if ctl.load(Ordering::SeqCst) == LEAVE {
                    let leave = LeaveGroupRequest {
                        group_id: GROUP.into(),
                        members: vec![LeavingMember { member_id: member_id.clone(), instance_id: None }],
                    };
                    let _ = client.leave_group(leave).await;
                }
                return;
            }
        }
    }
}

/// One membership: a generation and the partitions it gave the member.
struct Owned<'a> {
    client: &'a Client,
    topic: &'static str,
    member_id: &'a str,
    generation: i32,
    partitions: Vec<u32>,
    id: usize,
}

impl Owned<'_> {
    /// Fetches, hands out and commits the owned partitions until the membership ends; `lease`
    /// is when the last request the coordinator accepted was sent.
    async fn consume(&self, mut lease: rill_rt::Instant, ctl: &AtomicU8, log: &Shared) -> Ended {
        let tps: Vec<TopicPartition> =
            self.partitions.iter().map(|p| TopicPartition { topic: self.topic.into(), partition: *p }).collect();
        let mut next: BTreeMap<u32, u64> = BTreeMap::new();
        for tp in &tps {
            let committed = loop {
                if ctl.load(Ordering::SeqCst) != RUN {
                    return Ended::Stopped;
                }
                match self.client.committed_offsets(GROUP, std::slice::from_ref(tp)).await {
                    Ok(c) => break c.get(tp).cloned().flatten().map_or(0, |c| c.offset),
                    Err(_) => rill_rt::sleep(Duration::from_millis(100)).await,
                }
            };
            next.insert(tp.partition, committed);
        }
        let mut last_heartbeat = lease;
        let mut uncommitted = false;
        loop {
            match ctl.load(Ordering::SeqCst) {
                CRASH => return Ended::Stopped,
                LEAVE => {
                    self.commit(&next, &mut uncommitted).await;
                    return Ended::Stopped;
                }
                _ => {}
            }
            if rill_rt::now() >= last_heartbeat + HEARTBEAT_EVERY {
                let sent = rill_rt::now();
                last_heartbeat = sent;
                let heartbeat = GroupHeartbeatRequest {
                    group_id: GROUP.into(),
                    member_id: self.member_id.into(),
                    instance_id: None,
                    generation_id: self.generation,
                };
                if let Ok(answer) = self.client.group_heartbeat(heartbeat).await {
                    match ErrorCode::try_from(answer.error_code) {
                        Ok(ErrorCode::None) => lease = sent,
                        Ok(ErrorCode::RebalanceInProgress) => {
                            // Eager: commit what was done, give everything up, rejoin.
                            self.commit(&next, &mut uncommitted).await;
                            return Ended::Rejoin;
                        }
                        Ok(ErrorCode::UnknownMemberId) => return Ended::Forgotten,
                        _ => return Ended::Rejoin,
                    }
                }
            }
            for &partition in &self.partitions {
                let offset = next.get(&partition).copied().unwrap_or(0);
                let fetched = self.client.fetch(self.topic, partition, Some(offset), Duration::from_millis(50)).await;
                // No await between here and the hand-out: the lease is checked right before it.
                if rill_rt::now() >= lease + SESSION {
                    return Ended::Rejoin;
                }
                let Ok(fetched) = fetched else { continue };
                let batch: Vec<Delivery> = fetched
                    .records
                    .iter()
                    .take(4)
                    .map(|r| Delivery { member: self.id, epoch: self.generation, partition, offset: r.offset })
                    .collect();
                log.lock().unwrap().polled.extend(batch.iter().copied());
                for d in batch {
                    if ctl.load(Ordering::SeqCst) == CRASH {
                        return Ended::Stopped;
                    }
                    log.lock().unwrap().processed.push(d);
                    next.insert(partition, d.offset + 1);
                    uncommitted = true;
                    rill_rt::sleep(Duration::from_millis(1)).await;
                }
            }
            if !self.commit(&next, &mut uncommitted).await {
                return Ended::Rejoin;
            }
        }
    }

    /// Commits `next` under the generation when something is uncommitted. False when the
    /// generation is gone (the member must rejoin); a commit that failed otherwise is tried
    /// again after the next round.
    async fn commit(&self, next: &BTreeMap<u32, u64>, uncommitted: &mut bool) -> bool {
        if !*uncommitted {
            return true;
        }
        let offsets: Vec<(TopicPartition, u64, String)> = next
            .iter()
            .map(|(p, o)| (TopicPartition { topic: self.topic.into(), partition: *p }, *o, String::new()))
            .collect();
        match self.client.commit_offsets_as(GROUP, Some((self.member_id, self.generation)), &offsets).await {
            Ok(()) => {
                *uncommitted = false;
                true
            }
            Err(e) => !matches!(
                e.code(),
                Some(ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId | ErrorCode::RebalanceInProgress)
            ),
        }
    }
}

/// Every replica's applied state of [`GROUP`]: its stored record's assignments (no partition
/// twice in one generation) and its committed offsets (never going back).
pub fn check_group_state(cluster: &SimCluster, watch: &mut CommitWatch) -> Vec<Violation> {
    let mut out = Vec::new();
    for id in cluster.ids() {
        let Some(node) = cluster.node(id) else { continue };
        let incarnation = cluster.incarnation(id);
        for hosted in node.replicas() {
            let Hosted::Offsets(p) = hosted else { continue };
            let (stored, committed) = p.peek(|m| {
                let committed: Vec<(String, u32, i64)> =
                    m.state().group(GROUP).map(|((t, p), c)| (t.clone(), *p, c.offset)).collect();
                let stored: Vec<Handout> = m
                    .classic_groups()
                    .get(GROUP)
                    .map(|g| {
                        g.members
                            .values()
                            .enumerate()
                            .map(|(i, member)| Handout {
                                member: i,
                                generation: g.generation,
                                partitions: decode(&member.assignment),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (stored, committed)
            });
            out.extend(group_ownership::classic_double_owners(&stored));
            for (topic, partition, offset) in committed {
                out.extend(watch.observe(id, incarnation, &topic, partition, offset));
            }
        }
    }
    out
}

/// Samples [`check_group_state`] every 20 ms until `ctl` leaves [`RUN`].
fn sampler(cluster: Arc<SimCluster>, ctl: Arc<AtomicU8>) -> madsim::task::JoinHandle<Vec<Violation>> {
    madsim::task::spawn(async move {
        let mut watch = CommitWatch::default();
        let mut found = Vec::new();
        while ctl.load(Ordering::SeqCst) == RUN {
            found.extend(check_group_state(&cluster, &mut watch));
            rill_rt::sleep(Duration::from_millis(20)).await;
        }
        found
    })
}

/// The coordinator leader's view of [`GROUP`]: its stored generation, each stored member's
/// partitions, and the committed offsets by partition.
struct Led {
    generation: i32,
    members: Vec<Vec<u32>>,
    committed: BTreeMap<u32, i64>,
}

/// [`Led`], once the coordinator's leader has applied its log.
fn led_group(cluster: &SimCluster) -> Option<Led> {
    cluster.ids().into_iter().find_map(|id| {
        let node = cluster.node(id)?;
        node.replicas().into_iter().find_map(|hosted| {
            let Hosted::Offsets(p) = hosted else { return None };
            p.read(|m| {
                let g = m.classic_groups().get(GROUP)?;
                let members = g.members.values().map(|m| decode(&m.assignment)).collect();
                let committed = m.state().group(GROUP).map(|((_, p), c)| (*p, c.offset)).collect();
                Some(Led { generation: g.generation, members, committed })
            })
            .ok()
            .flatten()
        })
    })
}

/// The generated `classic_groups` scenario: a classic group of one to five eager members on six
/// partitions while the seed's schedule makes members join, crash mid-batch, leave and pause
/// (some past the session timeout) and the seed's node faults (every kind) move the
/// coordinator's leadership. Then everything heals, the producer stops and the group must settle
/// with its lag at 0.
pub async fn run_generated() -> Report {
    const TOPIC: &str = "classic-in";
    let (trace, phase, cluster) =
        crate::run::start_generated("classic_groups", FAULT_PHASE, MEMBER_HOSTS as u32 + 2, None, None);
    cluster.create_topic_and_wait(TOPIC, PARTITIONS, rill_meta::CONSUMER_OFFSETS_TOPIC).await;

    let producing = Arc::new(AtomicU8::new(RUN));
    let producer = producer(&cluster, MEMBER_HOSTS + 1, TOPIC, producing.clone());
    let sampling = Arc::new(AtomicU8::new(RUN));
    let sampler = sampler(cluster.clone(), sampling.clone());
    let log: Shared = Arc::default();
    let faults = {
        let (cluster, trace) = (cluster.clone(), trace.clone());
        madsim::task::spawn(async move { faults::inject(&cluster, ALL_FAULTS, phase, &trace).await })
    };

    let schedule = member_schedule(&cluster, &trace, phase, SESSION, |host, id, ctl| {
        cluster.client_host(host).spawn(member(cluster.bootstrap(), id, TOPIC, ctl, log.clone()));
    })
    .await;
    let Schedule { running, crashes, leaves, pauses } = schedule;
    let fault_counts = faults.await.expect("the fault injector");
    trace.record(format!("faults over at {:?}: {crashes} member crashes, {leaves} leaves, {pauses} pauses", elapsed()));

    // Heal: the producer stops; the group must settle at the log end.
    producing.store(LEAVE, Ordering::SeqCst);
    let acked = producer.await.expect("the producer");
    let live = running.len();
    let deadline = rill_rt::now() + LIVENESS_BOUND;
    let mut hw: BTreeMap<u32, u64>;
    let mut last_seen = String::from("no coordinator");
    let mut last_committed = BTreeMap::new();
    let mut violations = Vec::new();
    loop {
        hw = high_watermarks(&cluster, TOPIC).await;
        if let Some(Led { generation, members, committed }) = led_group(&cluster) {
            let caught_up = group_delivery::lagging(&committed, &hw).is_empty();
            let covered: usize = members.iter().map(Vec::len).sum();
            last_seen = format!("generation {generation}, members {members:?}, committed {committed:?}");
            last_committed = committed;
            if caught_up && members.len() == live && covered == PARTITIONS as usize {
                trace.record(format!("settled at {:?}, generation {generation}", elapsed()));
                break;
            }
        }
        if rill_rt::now() >= deadline {
            violations.extend(group_delivery::lagging(&last_committed, &hw));
            violations.push(Violation {
                checker: "lag",
                detail: format!(
                    "the classic group did not settle with {live} members within {LIVENESS_BOUND:?}; last seen: {last_seen}"
                ),
            });
            break;
        }
        rill_rt::sleep(Duration::from_millis(100)).await;
    }
    sampling.store(LEAVE, Ordering::SeqCst);
    violations.extend(sampler.await.expect("the sampler"));
    for r in &running {
        r.ctl.store(LEAVE, Ordering::SeqCst);
    }

    let log = log.lock().unwrap();
    violations.extend(group_ownership::classic_double_owners(&log.handouts));
    violations.extend(group_delivery::epoch_order(&log.polled));
    violations.extend(group_delivery::skipped(&log.processed, &hw));
    let generations = log.handouts.iter().map(|h| h.generation).max().unwrap_or(0);
    trace.record(format!(
        "high watermarks {hw:?}, committed {last_committed:?}, {} processed, {generations} generations",
        log.processed.len()
    ));
    let processed = log.processed.len();
    drop(log);
    Report::of_generated(&trace, processed, usize::try_from(acked).unwrap_or(usize::MAX), fault_counts, violations)
}

fn elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}
