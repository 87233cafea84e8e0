//! Consumer groups under faults: the members, the samplers and the generated `groups` scenario.
//!
//! ```text
//!  producer (1 record per partition every 100 ms, acks=all)
//!  members on their own client hosts: poll ─► hand out record by record ─► commit
//!      schedule from the seed: join, crash mid-batch, leave, pause (some past the session)
//!  node faults from the seed (faults::inject)          sampler: every replica's group state
//!  heal ─► producer stops ─► lag must reach 0 ─► checkers
//! ```
//!
//! Checkers: [`group_ownership`] (white-box: no partition with two owners in any replica's state,
//! none of a topic its owner did not subscribe to, committed offsets never go back) and
//! [`group_delivery`] (client-visible: members hand a partition out in epoch order, nothing
//! below the high watermark is skipped, lag reaches 0).
//!
//! In the generated scenario even members subscribe by pattern (the topic's whole name, which
//! the coordinator resolves against the metadata, KIP-848's server-side regex) and odd ones by
//! name, while a decoy topic whose name contains the pattern exists beside the group's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rill_client::{Acks, ConsumerConfig, OffsetSpec, Record};
use rill_coordinator::groups::{ConsumerGroup, GroupState};
use rill_server::node::Hosted;

use crate::checkers::group_delivery::{self, Delivery};
use crate::checkers::group_ownership::{self, CommitWatch};
use crate::checkers::Violation;
use crate::cluster::{connect, SimCluster};
use crate::faults;
use crate::run::{Report, LIVENESS_BOUND};
use crate::scenarios::ALL_FAULTS;
use crate::trace::Trace;

/// The group every member joins.
pub const GROUP: &str = "g";
/// Partitions of the group's topic.
pub const PARTITIONS: u32 = 6;
/// Client hosts a member may run on (host 0 is the admin's, the last the producer's).
pub const MEMBER_HOSTS: usize = 6;
/// Most members at once in the generated scenario.
const MOST_MEMBERS: usize = 5;
/// The generated scenario's fault phase (ten times longer with `RILL_SIM_LONG`).
const FAULT_PHASE: Duration = Duration::from_secs(30);
/// The session timeout of the simulated cluster (`cluster.rs`): a pause longer than this gets a
/// member fenced.
const SESSION: Duration = Duration::from_secs(6);

/// How a member goes on: its control word.
pub const RUN: u8 = 0;
/// Stop at once, mid-batch, without committing or leaving (a crash).
pub const CRASH: u8 = 1;
/// Leave the group gracefully.
pub const LEAVE: u8 = 2;

/// What the members' polls returned, and what their application processed, each in the order
/// it happened.
#[derive(Debug, Default)]
pub struct Log {
    /// Every record a `poll` returned, logged before the member awaits anything else: what the
    /// client handed out, and at which epoch (for [`group_delivery::epoch_order`]).
    pub polled: Vec<Delivery>,
    /// Every record the member finished processing (for [`group_delivery::skipped`]: a member
    /// that crashes mid-batch leaves the rest of the batch to the next owner).
    pub processed: Vec<Delivery>,
}

/// The members' shared [`Log`].
pub type Deliveries = Arc<Mutex<Log>>;

/// Checks both lists of `log` against the final high watermarks `hw`.
pub fn check_deliveries(log: &Log, hw: &BTreeMap<u32, u64>) -> Vec<Violation> {
    let mut out = group_delivery::epoch_order(&log.polled);
    out.extend(group_delivery::skipped(&log.processed, hw));
    out
}

/// One member of [`GROUP`] subscribed to `topic` — by name, or `by_pattern` by a pattern that is
/// the topic's whole name: polls, hands out record by record (each takes a millisecond of
/// "work"), commits after each batch (again after the next poll if that failed) — odd members
/// in the background ([`rill_client::Consumer::commit_async`]). `ctl` makes it crash or leave;
/// a crash lands between two records of a batch.
pub async fn member(
    bootstrap: Vec<String>,
    id: usize,
    topic: &'static str,
    by_pattern: bool,
    ctl: Arc<AtomicU8>,
    delivered: Deliveries,
) {
    let client = connect(bootstrap).await;
    let config = ConsumerConfig {
        group_id: Some(GROUP.into()),
        start: OffsetSpec::Earliest,
        rebalance_timeout: Duration::from_secs(10),
        // Less than a fetch brings: records wait in the buffer between polls.
        max_poll_records: 4,
        ..ConsumerConfig::default()
    };
    let mut consumer = rill_client::Consumer::new(client, config);
    if by_pattern {
        consumer.subscribe_pattern(topic).expect("subscribe by pattern");
    } else {
        consumer.subscribe(&[topic]).expect("subscribe");
    }
    let mut uncommitted = false;
    let background = id % 2 == 1;
    let mut pending: Option<rill_client::PendingCommit> = None;
    loop {
        match ctl.load(Ordering::SeqCst) {
            CRASH => return consumer.close(),
            LEAVE => {
                let _ = consumer.shutdown().await;
                return;
            }
            _ => {}
        }
        // Errors are transient under faults (a leader moving): the member polls again.
        let Ok(records) = consumer.poll(Duration::from_millis(100)).await else { continue };
        // No await since `poll` returned: this is the epoch the records were handed out at. (A
        // member frozen mid-batch may process the rest of a batch after it was fenced: that is
        // the application's at-least-once duplicate, not a lease the client kept.)
        let epoch = consumer.member().map_or(-1, |(_, e)| e);
        let batch: Vec<Delivery> =
            records.iter().map(|r| Delivery { member: id, epoch, partition: r.partition, offset: r.offset }).collect();
        delivered.lock().unwrap().polled.extend(batch.iter().copied());
        for d in batch {
            if ctl.load(Ordering::SeqCst) == CRASH {
                return consumer.close();
            }
            delivered.lock().unwrap().processed.push(d);
            rill_rt::sleep(Duration::from_millis(1)).await;
        }
        // A commit that failed (a coordinator moving) is tried again after the next poll, even
        // an empty one: the last records before the producer stops must be committed too.
        uncommitted |= !records.is_empty();
        if background {
            // Odd members commit in the background, so commits overlap each other and the
            // polls; an idle poll collects the newest one's outcome.
            if records.is_empty() {
                if let Some(p) = pending.take() {
                    uncommitted |= p.await.is_err();
                }
            }
            if uncommitted {
                pending = Some(consumer.commit_async());
                uncommitted = false;
            }
        } else if uncommitted {
            uncommitted = consumer.commit().await.is_err();
        }
    }
}

/// A producer on client host `host` writing one record to each partition of `topic` every
/// 100 ms until `ctl` leaves [`RUN`]. Returns how many sends were acknowledged.
pub fn producer(
    cluster: &SimCluster,
    host: usize,
    topic: &'static str,
    ctl: Arc<AtomicU8>,
) -> madsim::task::JoinHandle<u64> {
    producer_every(cluster, host, topic, ctl, Duration::from_millis(100))
}

/// [`producer`], writing a round every `every`.
pub fn producer_every(
    cluster: &SimCluster,
    host: usize,
    topic: &'static str,
    ctl: Arc<AtomicU8>,
    every: Duration,
) -> madsim::task::JoinHandle<u64> {
    let bootstrap = cluster.bootstrap();
    cluster.client_host(host).spawn(async move {
        let client = connect(bootstrap).await;
        let (mut n, mut acked) = (0u64, 0u64);
        while ctl.load(Ordering::SeqCst) == RUN {
            for p in 0..PARTITIONS {
                let sent = client.produce(topic, p, vec![Record::new(format!("r{n}-{p}"))], Acks::All).await;
                acked += u64::from(sent.is_ok());
            }
            n += 1;
            rill_rt::sleep(every).await;
        }
        acked
    })
}

/// Every replica's applied state of [`GROUP`], whose members subscribe to `topic`: double owners,
/// partitions of other topics owned, and committed offsets going back.
pub fn check_group_state(cluster: &SimCluster, topic: &str, watch: &mut CommitWatch) -> Vec<Violation> {
    let mut out = Vec::new();
    for id in cluster.ids() {
        let Some(node) = cluster.node(id) else { continue };
        let incarnation = cluster.incarnation(id);
        for hosted in node.replicas() {
            let Hosted::Offsets(p) = hosted else { continue };
            let (group, committed) = p.peek(|m| {
                let committed: Vec<(String, u32, i64)> =
                    m.state().group(GROUP).map(|((t, p), c)| (t.clone(), *p, c.offset)).collect();
                (m.groups().get(GROUP).cloned(), committed)
            });
            if let Some(g) = group {
                out.extend(group_ownership::double_owners(&g));
                out.extend(group_ownership::foreign_assignments(&g, topic));
            }
            for (topic, partition, offset) in committed {
                out.extend(watch.observe(id, incarnation, &topic, partition, offset));
            }
        }
    }
    out
}

/// Samples [`check_group_state`] every 20 ms until `ctl` leaves [`RUN`].
pub fn sampler(
    cluster: Arc<SimCluster>,
    topic: &'static str,
    ctl: Arc<AtomicU8>,
) -> madsim::task::JoinHandle<Vec<Violation>> {
    madsim::task::spawn(async move {
        let mut watch = CommitWatch::default();
        let mut found = Vec::new();
        while ctl.load(Ordering::SeqCst) == RUN {
            found.extend(check_group_state(&cluster, topic, &mut watch));
            rill_rt::sleep(Duration::from_millis(20)).await;
        }
        found
    })
}

/// The coordinator leader's view of [`GROUP`] and its committed offsets (by partition), once
/// that leader has applied its log.
pub fn led_group(cluster: &SimCluster) -> Option<(ConsumerGroup, BTreeMap<u32, i64>)> {
    cluster.ids().into_iter().find_map(|id| {
        let node = cluster.node(id)?;
        node.replicas().into_iter().find_map(|hosted| {
            let Hosted::Offsets(p) = hosted else { return None };
            p.read(|m| {
                let g = m.groups().get(GROUP).cloned()?;
                let committed = m.state().group(GROUP).map(|((_, p), c)| (*p, c.offset)).collect();
                Some((g, committed))
            })
            .ok()
            .flatten()
        })
    })
}

/// True when `group` is stable with `live` members owning every partition.
pub fn settled(group: &ConsumerGroup, live: usize) -> bool {
    let owned: usize = group.members.values().map(|m| rill_coordinator::groups::group::count(&m.assigned)).sum();
    group.state() == GroupState::Stable && group.members.len() == live && owned == PARTITIONS as usize
}

/// Every partition's high watermark of `topic`, asked from client host 0 until each answers.
pub async fn high_watermarks(cluster: &SimCluster, topic: &'static str) -> BTreeMap<u32, u64> {
    let client = cluster.client().await;
    cluster
        .on_client(async move {
            let mut hw = BTreeMap::new();
            for p in 0..PARTITIONS {
                loop {
                    if let Ok(o) = client.list_offset(topic, p, OffsetSpec::Latest).await {
                        hw.insert(p, o);
                        break;
                    }
                    rill_rt::sleep(Duration::from_millis(100)).await;
                }
            }
            hw
        })
        .await
}

/// A running member of a generated group scenario: its control word and the client host it
/// runs on.
pub struct Running {
    /// The scenario's number for it.
    pub id: usize,
    /// Its client host.
    pub host: usize,
    /// Its control word ([`RUN`], [`CRASH`], [`LEAVE`]).
    pub ctl: Arc<AtomicU8>,
}

/// What [`member_schedule`] did: the members still running at its end, and how many it crashed,
/// made leave and paused.
pub struct Schedule {
    /// The members running at the end.
    pub running: Vec<Running>,
    /// Members crashed.
    pub crashes: u32,
    /// Members that left.
    pub leaves: u32,
    /// Pauses of a member's client host.
    pub pauses: u32,
}

/// The members' schedule of the generated group scenarios, for `phase`: three members start
/// (`spawn(host, id, ctl)` starts one on a free client host), then every 0.8–2.5 s the seed
/// starts one (up to five), crashes one mid-batch, makes one leave, or pauses one's client host
/// — half the pauses longer than `session`, so it is removed while frozen — and a member starts
/// whenever none runs.
pub async fn member_schedule(
    cluster: &SimCluster,
    trace: &Trace,
    phase: Duration,
    session: Duration,
    mut spawn: impl FnMut(usize, usize, Arc<AtomicU8>),
) -> Schedule {
    let mut running: Vec<Running> = Vec::new();
    let mut next_id = 0usize;
    let mut start = |running: &mut Vec<Running>| {
        let Some(host) = (1..=MEMBER_HOSTS).find(|h| running.iter().all(|r| r.host != *h)) else { return };
        let ctl = Arc::new(AtomicU8::new(RUN));
        spawn(host, next_id, ctl.clone());
        trace.record(format!("member {next_id} starts on host {host} at {:?}", elapsed()));
        running.push(Running { id: next_id, host, ctl });
        next_id += 1;
    };
    for _ in 0..3 {
        start(&mut running);
    }
    let mut rng = rill_rt::rng();
    let end = rill_rt::now() + phase;
    let (mut crashes, mut leaves, mut pauses) = (0u32, 0u32, 0u32);
    while rill_rt::now() < end {
        rill_rt::sleep(Duration::from_millis(rng.gen_range(800..2500))).await;
        let pick = rng.gen_range(0..running.len().max(1));
        match rng.gen_range(0..10) {
            0..=2 if running.len() < MOST_MEMBERS => start(&mut running),
            3 | 4 if running.len() > 1 => {
                let r = running.remove(pick);
                r.ctl.store(CRASH, Ordering::SeqCst);
                trace.record(format!("member {} crashes at {:?}", r.id, elapsed()));
                crashes += 1;
            }
            5 if running.len() > 1 => {
                let r = running.remove(pick);
                r.ctl.store(LEAVE, Ordering::SeqCst);
                trace.record(format!("member {} leaves at {:?}", r.id, elapsed()));
                leaves += 1;
            }
            6..=8 if !running.is_empty() => {
                let r = &running[pick];
                // Half the pauses outlast the session: the member is fenced while frozen.
                let hold = if rng.gen_bool(0.5) {
                    session + Duration::from_millis(rng.gen_range(1000..4000))
                } else {
                    Duration::from_millis(rng.gen_range(500..3000))
                };
                trace.record(format!("member {} paused for {hold:?} at {:?}", r.id, elapsed()));
                cluster.pause_client(r.host);
                rill_rt::sleep(hold).await;
                cluster.resume_client(r.host);
                pauses += 1;
            }
            _ => {}
        }
        if running.is_empty() {
            start(&mut running);
        }
    }
    Schedule { running, crashes, leaves, pauses }
}

/// The generated `groups` scenario: a group of one to five members on six partitions while the
/// seed's schedule makes members join, crash mid-batch, leave and pause (some past the session
/// timeout) and the seed's node faults (every kind) run alongside. Then everything heals, the
/// producer stops and the group must settle with its lag at 0.
pub async fn run_generated() -> Report {
    const TOPIC: &str = "grouped";
    // A topic the members' pattern matches only in part: never theirs.
    const DECOY: &str = "grouped-decoy";
    // Half the seeds heartbeat every 2 s: each heartbeat then held up to 2 s (a third of the
    // session), so faults land while heartbeats are held.
    let interval_ms = if rill_rt::rng().gen_bool(0.5) { 500 } else { 2_000 };
    let timeouts = rill_coordinator::groups::Timeouts { session_ms: 6_000, heartbeat_interval_ms: interval_ms };
    let (trace, phase, cluster) =
        crate::run::start_generated("groups", FAULT_PHASE, MEMBER_HOSTS as u32 + 2, None, Some(timeouts));
    cluster.create_topic_and_wait(TOPIC, PARTITIONS, rill_meta::CONSUMER_OFFSETS_TOPIC).await;
    cluster.create_topic_and_wait(DECOY, 2, rill_meta::CONSUMER_OFFSETS_TOPIC).await;

    let producing = Arc::new(AtomicU8::new(RUN));
    let producer = producer(&cluster, MEMBER_HOSTS + 1, TOPIC, producing.clone());
    let sampling = Arc::new(AtomicU8::new(RUN));
    let sampler = sampler(cluster.clone(), TOPIC, sampling.clone());
    let delivered: Deliveries = Arc::default();
    let faults = {
        let (cluster, trace) = (cluster.clone(), trace.clone());
        madsim::task::spawn(async move { faults::inject(&cluster, ALL_FAULTS, phase, &trace).await })
    };

    // The members' schedule.
    let schedule = member_schedule(&cluster, &trace, phase, SESSION, |host, id, ctl| {
        let by_pattern = id % 2 == 0;
        cluster.client_host(host).spawn(member(cluster.bootstrap(), id, TOPIC, by_pattern, ctl, delivered.clone()));
    })
    .await;
    let Schedule { running, crashes, leaves, pauses } = schedule;
    let fault_counts = faults.await.expect("the fault injector");
    trace.record(format!("faults over at {:?}: {crashes} member crashes, {leaves} leaves, {pauses} pauses", elapsed()));

    // Heal: the producer stops; the group must settle at the log end.
    producing.store(LEAVE, Ordering::SeqCst);
    let acked = producer.await.expect("the producer");
    let mut hw: BTreeMap<u32, u64>;
    let live = running.len();
    let deadline = rill_rt::now() + LIVENESS_BOUND;
    let mut last_committed = BTreeMap::new();
    let mut last_group = None;
    let mut violations = Vec::new();
    loop {
        // A produce that timed out may still be committed by a new leader after the first
        // reading: the log end is read again until the group has caught up with it.
        hw = high_watermarks(&cluster, TOPIC).await;
        if let Some((g, committed)) = led_group(&cluster) {
            let caught_up = group_delivery::lagging(&committed, &hw).is_empty();
            last_committed = committed;
            last_group = Some(describe(&g));
            if caught_up && settled(&g, live) {
                trace.record(format!("settled at {:?}, group epoch {}", elapsed(), g.epoch));
                break;
            }
        }
        if rill_rt::now() >= deadline {
            violations.extend(group_delivery::lagging(&last_committed, &hw));
            violations.push(Violation {
                checker: "lag",
                detail: format!(
                    "the group did not settle with {live} members within {LIVENESS_BOUND:?}; last seen: {}",
                    last_group.as_deref().unwrap_or("no coordinator")
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

    let log = delivered.lock().unwrap();
    violations.extend(check_deliveries(&log, &hw));
    trace.record(format!("high watermarks {hw:?}, committed {last_committed:?}, {} processed", log.processed.len()));
    let processed = log.processed.len();
    drop(log);
    Report::of_generated(&trace, processed, usize::try_from(acked).unwrap_or(usize::MAX), fault_counts, violations)
}

/// One line of `group`: its epochs and each member's epoch, state and partitions.
fn describe(group: &ConsumerGroup) -> String {
    let members: Vec<String> = group
        .members
        .values()
        .map(|m| format!("{} e{} {} {:?} revoking {:?}", m.member_id, m.epoch, m.state.name(), m.assigned, m.revoking))
        .collect();
    format!("epoch {} target {} [{}]", group.epoch, group.target_epoch, members.join("; "))
}

fn elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}
