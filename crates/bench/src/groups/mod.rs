//! Consumer group measurements (KIP-848, docs/groups.md) on a real 3-node cluster:
//!
//! * [`member`] — a subscribed `Consumer` polling in its own task, recording what it receives
//!   (partition, offset, time), owns, commits and loses.
//! * [`rebalance`] — `group-rebalance`: members join one by one under a steady producer; per
//!   join, the processing pause of partitions that kept their owner and of those that moved,
//!   and the time to a stable group, in cooperative and in eager mode.
//! * [`failover`] — `group-failover`: SIGKILL of the group's coordinator; time to each member's
//!   next successful commit, and whether a member lost its partitions.
//! * [`heartbeats`] — `group-heartbeats`: CPU per node of many idle groups heartbeating.
//! * [`report`] — the three results as text.
//!
//! ```text
//!  producer ──► topic (6 partitions) ──► members (Consumer::subscribe, one task each)
//!                                          │ receipts, assignments, commits
//!  describe_group ◄── coordinator ◄────────┘ heartbeats
//!       └─► stable? (every member at the group epoch, owning its target, acted on it)
//! ```

pub mod failover;
pub mod heartbeats;
pub mod member;
pub mod rebalance;
pub mod report;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use rill_client::{Client, Producer, ProducerConfig, Record};
use rill_proto::groups::DescribeGroupResponse;
use tokio::task::JoinHandle;

use crate::systems::rill::{start_with, wait_for_leaders, wait_for_partitions};
use crate::systems::{Deployment, Env};
use member::GroupMember;

/// How long a group may take to become stable after a member joins or a node restarts: a few
/// heartbeat intervals, with room for a loaded machine.
const STABLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the bench asks the coordinator whether the group is stable (each look is one
/// `DescribeGroup`; the stable time is known to within this plus one round trip).
const STABLE_POLL: Duration = Duration::from_millis(20);
/// Size of each record the steady producers send.
const RECORD_BYTES: usize = 100;

/// Starts 3 nodes whose consumer group members heartbeat every `heartbeat_interval` (the
/// `[groups] heartbeat-interval` setting; the session timeout stays at its default).
pub(crate) async fn start_cluster(env: &Env, name: &str, heartbeat_interval: Duration) -> anyhow::Result<Deployment> {
    let interval = humantime::format_duration(heartbeat_interval).to_string();
    start_with(env, name, 3, true, &[("RILL_GROUP_HEARTBEAT_INTERVAL", interval.as_str())]).await
}

/// Creates `topic` with `partitions` RF-3 partitions (`min.insync.replicas` 2).
pub(crate) async fn create_topic(client: &Client, topic: &str, partitions: u32) -> anyhow::Result<()> {
    let configs = [("min.insync.replicas".to_string(), "2".to_string())];
    client.create_topic(topic, partitions, 3, &configs).await.with_context(|| format!("cannot create {topic}"))?;
    wait_for_leaders(client, topic).await
}

/// A producer sending `rate` records per second, round-robin over the partitions of a topic
/// (record *n* to partition *n* mod partitions, due at *n*/rate: open loop).
pub(crate) struct SteadyProducer {
    stop: Arc<AtomicBool>,
    task: JoinHandle<anyhow::Result<ProducerTotals>>,
}

/// What a [`SteadyProducer`] did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProducerTotals {
    /// Records sent per second, on average.
    pub msgs_per_sec: f64,
    /// Records whose delivery failed.
    pub errors: u64,
}

impl SteadyProducer {
    /// Starts sending to `topic`.
    pub fn start(client: &Client, topic: &str, partitions: u32, rate: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let config = ProducerConfig { linger: Duration::from_millis(1), ..ProducerConfig::default() };
        let producer = Producer::new(client.clone(), config);
        let (topic, flag) = (topic.to_string(), stop.clone());
        let task = tokio::spawn(async move {
            // Deliveries are awaited in order by a second task, so a slow acknowledgement never
            // delays the schedule.
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<rill_client::DeliveryFuture>();
            let waiter = tokio::spawn(async move {
                let mut errors = 0u64;
                while let Some(d) = rx.recv().await {
                    if d.await.is_err() {
                        errors += 1;
                    }
                }
                errors
            });
            let start = tokio::time::Instant::now();
            let payload = Bytes::from(vec![b'g'; RECORD_BYTES]);
            let mut n = 0u64;
            let mut send_errors = 0u64;
            while !flag.load(Ordering::SeqCst) {
                tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / rate.max(1) as f64)).await;
                let partition = (n % u64::from(partitions.max(1))) as u32;
                match producer.send_to(&topic, partition, Record::new(payload.clone())).await {
                    Ok(d) => {
                        let _ = tx.send(d);
                    }
                    Err(_) => send_errors += 1,
                }
                n += 1;
            }
            let elapsed = start.elapsed().as_secs_f64().max(1e-9);
            drop(tx);
            producer.close().await;
            let errors = waiter.await.context("the delivery counter")? + send_errors;
            Ok(ProducerTotals { msgs_per_sec: n as f64 / elapsed, errors })
        });
        Self { stop, task }
    }

    /// Stops sending and waits for every delivery.
    pub async fn stop(self) -> anyhow::Result<ProducerTotals> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.context("the steady producer")?
    }
}

/// Waits until `group` is stable with exactly `members` in it, and returns when that was first
/// seen. Stable means, as its coordinator describes it: state `stable`, every member at the
/// group epoch owning its whole target with nothing being revoked, the members together owning
/// all `partitions` partitions; and, as the members see it, each has acted on that assignment
/// (its own assignment, after its last poll, is the coordinator's, at the same epoch).
pub(crate) async fn wait_stable(
    client: &Client,
    group: &str,
    members: &[GroupMember],
    partitions: u32,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(i) = members.iter().position(GroupMember::has_exited) {
            bail!("member {i} of group {group} stopped polling (see its error when it is stopped)");
        }
        let why = match client.describe_group(group).await {
            Ok(d) => match stable(&d, members, partitions) {
                Ok(()) => return Ok(Instant::now()),
                Err(why) => why,
            },
            Err(e) => format!("describe_group failed: {e}"),
        };
        if Instant::now() > deadline {
            bail!("group {group} not stable with {} members within {timeout:?}: {why}", members.len());
        }
        tokio::time::sleep(STABLE_POLL).await;
    }
}

/// `Ok` when the description and the members agree that the group is stable; else why not.
fn stable(d: &DescribeGroupResponse, members: &[GroupMember], partitions: u32) -> Result<(), String> {
    if d.state != "stable" {
        return Err(format!("state {}", d.state));
    }
    if d.members.len() != members.len() {
        return Err(format!("{} members described, {} running", d.members.len(), members.len()));
    }
    let mut owned = BTreeSet::new();
    for m in &d.members {
        if m.member_epoch != d.group_epoch {
            return Err(format!("member {} at epoch {}, group at {}", m.member_id, m.member_epoch, d.group_epoch));
        }
        let assigned = member::partitions_of(m.assignment.as_ref());
        if !member::partitions_of(m.revoking.as_ref()).is_empty()
            || assigned != member::partitions_of(m.target.as_ref())
        {
            return Err(format!("member {} has not reached its target", m.member_id));
        }
        owned.extend(assigned);
    }
    if owned.len() != partitions as usize {
        return Err(format!("{} of {partitions} partitions owned", owned.len()));
    }
    for (i, member) in members.iter().enumerate() {
        let view = member.view();
        let Some((id, epoch)) = &view.member else { return Err(format!("member {i} has not joined")) };
        let Some(described) = d.members.iter().find(|m| &m.member_id == id) else {
            return Err(format!("member {i} ({id}) is not described"));
        };
        if *epoch != d.group_epoch || view.assignment != member::partitions_of(described.assignment.as_ref()) {
            return Err(format!("member {i} has not acted on its assignment yet"));
        }
    }
    Ok(())
}

/// Waits until every partition of `topics` has its full ISR and is led by its preferred replica
/// (the first in its replica list): after a node restarts, leadership moves back to it within
/// seconds (preferred-leader balancing), and a measurement started before that would include
/// those moves.
pub(crate) async fn wait_settled_leaders(client: &Client, topics: &[&str], timeout: Duration) -> anyhow::Result<()> {
    for topic in topics {
        let what = "leaders on their preferred replicas with full ISRs";
        wait_for_partitions(client, topic, timeout, what, |p| {
            p.leader.is_some() && p.leader == p.replicas.first().copied() && p.isr.len() == p.replicas.len()
        })
        .await?;
    }
    Ok(())
}

/// Stops `members` (each leaves the group) and returns what each saw, in order.
pub(crate) async fn stop_all(members: Vec<GroupMember>) -> anyhow::Result<Vec<member::MemberView>> {
    let mut views = Vec::new();
    for (i, m) in members.into_iter().enumerate() {
        views.push(m.stop().await.with_context(|| format!("member {i}"))?);
    }
    Ok(views)
}

/// The median of `values` (0 for none; an infinite value — a miss — sorts last).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
