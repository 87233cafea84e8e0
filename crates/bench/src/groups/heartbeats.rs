//! `group-heartbeats`: the CPU a cluster spends on many idle consumer groups.
//!
//! `groups` groups × 3 members, all subscribed to one 3-partition topic that nobody writes. The
//! members are **emulated**: each is a task sending `ConsumerGroupHeartbeat` RPCs through
//! `rill-client`'s `Client::consumer_group_heartbeat` exactly as the client's membership task
//! does (join at epoch 0 with a client-made member id, then its epoch and the partitions it
//! owns every heartbeat interval the coordinator asks for, at once after taking a new
//! assignment, rejoining when fenced) — but without a `Consumer`, so no fetches: what is
//! measured is heartbeats alone, and 3,000 members fit in the load generator beside the three
//! nodes. The members share `CLIENTS` clients (connections), not one each.
//!
//! By default each member keeps one heartbeat held at the coordinator as the client does
//! (`wait_ms` of one interval, the next sent as soon as the answer comes): the coordinator
//! holds 3,000 requests at a time and answers each at the end of its hold. With
//! `--heartbeats-plain` the members send heartbeats answered at once and sleep an interval
//! between them (the path before long polls), so both costs can be compared in one run of each.
//! Held round trips include the hold, so latencies are reported for plain heartbeats only.
//!
//! Joins are spread over one heartbeat interval. Once every group is `stable` with 3 members
//! (`ListGroups`), the nodes' CPU is measured over `measure`; the same window is measured
//! before any member starts (the idle cluster, internal topics included), and the load
//! generator's own CPU during the measured window is reported beside it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rill_client::{Client, ErrorCode};
use rill_proto::groups::{ConsumerGroupHeartbeatRequest, OwnedPartitions, SubscribedTopics};
use serde::Serialize;

use super::member::partitions_of;
use super::{create_topic, start_cluster};
use crate::process::own_cpu_seconds;
use crate::stats::Latencies;
use crate::systems::Env;

/// Members per group.
const MEMBERS_PER_GROUP: u32 = 3;
/// Partitions of the subscribed topic: one per member.
const PARTITIONS: u32 = 3;
/// Clients (each with its own connections) the emulated members are spread over.
const CLIENTS: usize = 16;
/// Wait after a failed heartbeat (the client's `RETRY_AFTER`).
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// The rebalance timeout members join with (the client's default, `max.poll.interval.ms`).
const REBALANCE_TIMEOUT_MS: u32 = 300_000;
/// How long every group may take to become stable.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Quiet time before each measured window: elections, ISR changes and the internal topics'
/// last writes settle, and their Raft groups go quiescent (after 3 s idle).
const QUIET_BEFORE_MEASURING: Duration = Duration::from_secs(10);

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct HeartbeatSettings {
    /// Groups (3 members each).
    pub groups: u32,
    /// The coordinator's heartbeat interval (`[groups] heartbeat-interval`).
    pub heartbeat_interval: Duration,
    /// The measured window.
    pub measure: Duration,
    /// Members keep a heartbeat held at the coordinator (a long poll), as the client does.
    pub held: bool,
}

/// The scenario's result.
#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatsResult {
    /// Groups.
    pub groups: u32,
    /// Members (3 per group).
    pub members: u32,
    /// How the members are driven.
    pub members_are: String,
    /// The members' heartbeat interval, ms.
    pub heartbeat_interval_ms: u64,
    /// Whether each member kept a heartbeat held at the coordinator (`wait_ms`).
    pub held: bool,
    /// From the first join to every group stable, s.
    pub settle_seconds: f64,
    /// The measured window, s.
    pub seconds: f64,
    /// Percent of one core per node over the same window before any member started.
    pub idle_cpu_percent_per_node: Vec<f64>,
    /// Percent of one core per node with every member heartbeating.
    pub cpu_percent_per_node: Vec<f64>,
    /// Percent of one core the load generator (this process) used in the measured window.
    pub generator_cpu_percent: f64,
    /// Successful heartbeats per second in the measured window (members ÷ interval expected).
    pub heartbeats_per_sec: f64,
    /// Heartbeats that failed in the measured window.
    pub heartbeat_errors: u64,
    /// Members that rejoined (fenced) in the measured window.
    pub rejoins: u64,
    /// Heartbeat round trip in the measured window, ms.
    pub heartbeat_p50_ms: f64,
    /// See `heartbeat_p50_ms`.
    pub heartbeat_p99_ms: f64,
    /// See `heartbeat_p50_ms`.
    pub heartbeat_max_ms: f64,
    /// Groups listed `stable` with 3 members at the end of the window.
    pub stable_groups_after: usize,
}

/// What the emulated members count while `measuring`.
#[derive(Default)]
struct Counters {
    measuring: AtomicBool,
    heartbeats: AtomicU64,
    errors: AtomicU64,
    rejoins: AtomicU64,
    latencies: Mutex<Latencies>,
}

/// Runs `settings.groups` groups of 3 idle members and measures the nodes' CPU.
pub async fn group_heartbeats(env: &Env, settings: &HeartbeatSettings) -> anyhow::Result<HeartbeatsResult> {
    let mut deployment = start_cluster(env, "rill-group-heartbeats", settings.heartbeat_interval).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let topic = "heartbeats";
    create_topic(&client, topic, PARTITIONS).await?;
    client.wait_for_leaders("__consumer_offsets", Duration::from_secs(60)).await?;

    eprintln!("group-heartbeats: measuring the idle cluster for {:?}…", settings.measure);
    tokio::time::sleep(QUIET_BEFORE_MEASURING).await;
    let (idle_cpu_percent_per_node, _) = measure_cpu(&mut deployment, settings.measure).await?;

    let members = settings.groups * MEMBERS_PER_GROUP;
    eprintln!("group-heartbeats: starting {members} members in {} groups…", settings.groups);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Client::connect(&deployment.endpoints).await?);
    }
    let counters = Arc::new(Counters::default());
    let first_join = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..members {
        let client = clients[i as usize % CLIENTS].clone();
        let group = format!("bench-hb-{}", i / MEMBERS_PER_GROUP);
        // Joins spread evenly over one heartbeat interval.
        let delay = settings.heartbeat_interval.mul_f64(f64::from(i) / f64::from(members.max(1)));
        tasks.push(tokio::spawn(member(
            client,
            group,
            topic.to_string(),
            delay,
            settings.heartbeat_interval,
            settings.held,
            counters.clone(),
        )));
    }
    let outcome = measure_members(&client, &mut deployment, settings, &counters, first_join).await;
    for t in &tasks {
        t.abort();
    }
    let (settle_seconds, seconds, cpu_percent_per_node, generator_cpu_percent, stable_groups_after) = outcome?;
    let latencies = counters.latencies.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let result = HeartbeatsResult {
        groups: settings.groups,
        members,
        members_are: "emulated: ConsumerGroupHeartbeat RPCs via rill-client (no Consumer, no fetches)".to_string(),
        heartbeat_interval_ms: settings.heartbeat_interval.as_millis() as u64,
        held: settings.held,
        settle_seconds,
        seconds,
        idle_cpu_percent_per_node,
        cpu_percent_per_node,
        generator_cpu_percent,
        heartbeats_per_sec: counters.heartbeats.load(Ordering::SeqCst) as f64 / seconds.max(1e-9),
        heartbeat_errors: counters.errors.load(Ordering::SeqCst),
        rejoins: counters.rejoins.load(Ordering::SeqCst),
        heartbeat_p50_ms: latencies.quantile_ms(0.5),
        heartbeat_p99_ms: latencies.quantile_ms(0.99),
        heartbeat_max_ms: latencies.max_ms(),
        stable_groups_after,
    };
    crate::scenarios::finish(deployment, "group-heartbeats", &result);
    Ok(result)
}

/// Waits for every group to be stable, then measures: (settle s, measured s, CPU % per node,
/// generator CPU %, groups stable at the end).
async fn measure_members(
    client: &Client,
    deployment: &mut crate::systems::Deployment,
    settings: &HeartbeatSettings,
    counters: &Counters,
    first_join: Instant,
) -> anyhow::Result<(f64, f64, Vec<f64>, f64, usize)> {
    let deadline = first_join + SETTLE_TIMEOUT;
    loop {
        let stable = stable_groups(client).await.unwrap_or(0);
        if stable == settings.groups as usize {
            break;
        }
        if Instant::now() > deadline {
            bail!("{stable} of {} groups stable {SETTLE_TIMEOUT:?} after the first join", settings.groups);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let settle_seconds = first_join.elapsed().as_secs_f64();
    eprintln!(
        "group-heartbeats: every group stable after {settle_seconds:.1} s; measuring for {:?}…",
        settings.measure
    );
    tokio::time::sleep(QUIET_BEFORE_MEASURING).await;
    deployment.check_running()?;
    let own_before = own_cpu_seconds();
    counters.measuring.store(true, Ordering::SeqCst);
    let (cpu, seconds) = measure_cpu(deployment, settings.measure).await?;
    counters.measuring.store(false, Ordering::SeqCst);
    let generator = (own_cpu_seconds() - own_before) / seconds * 100.0;
    let stable_after = stable_groups(client).await.context("ListGroups after measuring")?;
    Ok((settle_seconds, seconds, cpu, generator, stable_after))
}

/// Percent of one core per node over `window`, and the seconds actually measured.
async fn measure_cpu(deployment: &mut crate::systems::Deployment, window: Duration) -> anyhow::Result<(Vec<f64>, f64)> {
    let before = deployment.cpu_seconds();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let seconds = t0.elapsed().as_secs_f64();
    let after = deployment.cpu_seconds();
    deployment.check_running()?;
    Ok((before.iter().zip(after).map(|((_, b), (_, a))| (a - b) / seconds * 100.0).collect(), seconds))
}

/// Groups listed `stable` with 3 members.
async fn stable_groups(client: &Client) -> anyhow::Result<usize> {
    let groups = client.list_groups().await?;
    Ok(groups.iter().filter(|g| g.state == "stable" && g.members == MEMBERS_PER_GROUP).count())
}

/// One emulated member of `group`, joining after `delay`; runs until aborted.
async fn member(
    client: Client,
    group: String,
    topic: String,
    delay: Duration,
    interval: Duration,
    held: bool,
    counters: Arc<Counters>,
) {
    tokio::time::sleep(delay).await;
    // As the client does (KIP-1082): the member makes its own id.
    let member_id = format!("{:032x}", rand::random::<u128>());
    let mut epoch = 0i32;
    let mut owned = OwnedPartitions::default();
    let mut interval = interval;
    loop {
        let joining = epoch == 0;
        let req = ConsumerGroupHeartbeatRequest {
            group_id: group.clone(),
            member_id: member_id.clone(),
            member_epoch: epoch,
            rebalance_timeout_ms: joining.then_some(REBALANCE_TIMEOUT_MS),
            subscribed_topics: joining.then(|| SubscribedTopics { topics: vec![topic.clone()] }),
            owned: Some(owned.clone()),
            client_id: "rill-bench".to_string(),
            wait_ms: (held && !joining).then(|| u32::try_from(interval.as_millis()).unwrap_or(u32::MAX)),
            ..ConsumerGroupHeartbeatRequest::default()
        };
        let sent = Instant::now();
        let answer = client.consumer_group_heartbeat(req).await;
        let measuring = counters.measuring.load(Ordering::SeqCst);
        match answer {
            Ok(resp) => {
                if measuring {
                    counters.heartbeats.fetch_add(1, Ordering::SeqCst);
                    if !held {
                        let us = sent.elapsed().as_micros() as u64;
                        counters.latencies.lock().unwrap_or_else(PoisonError::into_inner).record_us(us);
                    }
                }
                epoch = resp.member_epoch;
                if resp.heartbeat_interval_ms > 0 {
                    interval = Duration::from_millis(u64::from(resp.heartbeat_interval_ms));
                }
                if let Some(assignment) = resp.assignment {
                    let changed: BTreeSet<u32> = partitions_of(Some(&assignment));
                    if changed != partitions_of(Some(&owned)) {
                        // Nothing to finish: take it and report it at once, as the client does.
                        owned = assignment;
                        continue;
                    }
                }
                // Held: the next at once (after the rest of the hold, if it was answered early).
                let wait = if held { interval.saturating_sub(sent.elapsed()) } else { interval };
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                if measuring {
                    counters.errors.fetch_add(1, Ordering::SeqCst);
                }
                if matches!(e.code(), Some(ErrorCode::FencedMemberEpoch | ErrorCode::UnknownMemberId)) {
                    if measuring {
                        counters.rejoins.fetch_add(1, Ordering::SeqCst);
                    }
                    epoch = 0;
                    owned = OwnedPartitions::default();
                }
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}
