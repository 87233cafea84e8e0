//! `group-failover`: how long a consumer group cannot commit when its coordinator's node dies.
//!
//! Three members, each committing after every poll, share a 6-partition topic under a steady
//! producer. The coordinator is the leader of the `__consumer_offsets` partition the group id
//! hashes to (`FindCoordinator` names its node). That node is SIGKILLed; per member, the time
//! runs from the kill to the end of its first successful commit *called after* the kill (a
//! commit already in flight at the kill is not counted, even if it succeeds later: it may have
//! been applied before). Target: under 2 s. Beside the members, a probe (a client that does not
//! retry by itself) times when `FindCoordinator` first names another node and when that node
//! first answers `DescribeGroup` (it has loaded the group), to tell the coordinator's failover
//! apart from the members' clients finding it. Then: did any member lose its partitions (its
//! listener's `on_lost`: a fenced member, or a session that ran out by its own clock), and did
//! any partition change owner. The node is restarted, and the next kill waits until every
//! partition is back on its preferred leader with a full ISR and the group is stable.

use std::time::{Duration, Instant};

use anyhow::Context;
use rill_client::{Client, ClientOptions, Coordinator};
use serde::Serialize;

use super::member::{GroupMember, MemberOptions, POLL_TIMEOUT};
use super::{
    create_topic, median, start_cluster, stop_all, wait_settled_leaders, wait_stable, SteadyProducer, STABLE_TIMEOUT,
};
use crate::systems::rill::READY_TIMEOUT;
use crate::systems::Env;

/// Members of the group.
const MEMBERS: usize = 3;
/// Partitions of its topic.
const PARTITIONS: u32 = 6;
/// Records per second the producer writes (so every poll has records to commit).
const RATE: u64 = 300;
/// A member with no successful commit this long after the kill counts as a miss.
const COMMIT_DEADLINE: Duration = Duration::from_secs(60);
/// Steady running before each kill.
const BEFORE_KILL: Duration = Duration::from_secs(3);
/// Leaders moving back to a restarted node take its check interval (5 s) plus 10 s of
/// leadership on the survivor.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The internal topic the coordinators lead.
const CONSUMER_OFFSETS: &str = "__consumer_offsets";

/// The scenario's result.
#[derive(Debug, Clone, Serialize)]
pub struct GroupFailoverResult {
    /// Members (each commits after every poll).
    pub members: usize,
    /// The members' heartbeat interval, ms.
    pub heartbeat_interval_ms: u64,
    /// One per kill.
    pub kills: Vec<CoordinatorKill>,
    /// Over every member of every kill: kill → first successful commit called after it, ms.
    pub commit_ms_min: f64,
    /// See `commit_ms_min`.
    pub commit_ms_median: f64,
    /// See `commit_ms_min`.
    pub commit_ms_max: f64,
    /// Partitions any member heard lost over the whole run (target 0).
    pub lost_partitions: usize,
    /// Records per second the producer sent.
    pub load_msgs_per_sec: f64,
    /// Records it failed to deliver.
    pub load_errors: u64,
}

/// One kill of the coordinator's node.
#[derive(Debug, Clone, Serialize)]
pub struct CoordinatorKill {
    /// The node killed (the coordinator).
    pub node: u64,
    /// The coordinator after the kill, as `FindCoordinator` named it once every member had
    /// committed.
    pub new_coordinator: Option<u64>,
    /// Kill → `FindCoordinator` first names another node, ms (the coordinator partition has a
    /// new leader and the metadata says so).
    pub elected_ms: Option<f64>,
    /// Kill → the new coordinator first answers `DescribeGroup` (it has applied its log and
    /// serves the group), ms.
    pub serving_ms: Option<f64>,
    /// Per member: kill → end of its first successful commit called after the kill, ms
    /// (`None`: none within 60 s).
    pub commit_ms: Vec<Option<f64>>,
    /// Per member: commits refused or failed between the kill and that first success.
    pub failed_commits: Vec<usize>,
    /// The first failure seen, for the reader.
    pub first_failure: Option<String>,
    /// Partitions the members heard lost through this kill and the restart after it.
    pub lost: usize,
    /// Partitions whose owner differs before the kill and once stable after the restart.
    pub moved: usize,
}

/// Kills the group's coordinator `kills` times (restarting it between kills).
pub async fn group_failover(
    env: &Env,
    kills: u32,
    heartbeat_interval: Duration,
) -> anyhow::Result<GroupFailoverResult> {
    let mut deployment = start_cluster(env, "rill-group-failover", heartbeat_interval).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let topic = "group-failover";
    let group = "bench-failover";
    create_topic(&client, topic, PARTITIONS).await?;
    let producer = SteadyProducer::start(&client, topic, PARTITIONS, RATE);
    let options = MemberOptions {
        group: group.to_string(),
        topic: topic.to_string(),
        rebalance_mode: None,
        commit_every_poll: true,
        poll_timeout: POLL_TIMEOUT,
    };
    let mut members = Vec::new();
    for _ in 0..MEMBERS {
        members.push(GroupMember::start(&deployment.endpoints, &options).await?);
    }
    wait_stable(&client, group, &members, PARTITIONS, STABLE_TIMEOUT).await?;
    // The internal topic exists once a group has used it; from here on leaders must be settled.
    wait_settled_leaders(&client, &[topic, CONSUMER_OFFSETS], SETTLE_TIMEOUT).await?;

    // Single attempts: the probe's own 5 ms loop is the retry schedule.
    let options = ClientOptions { retry_budget: Duration::ZERO, ..ClientOptions::default() };
    let probe_client = Client::connect_with(&deployment.endpoints, options).await?;
    let mut results = Vec::new();
    for k in 1..=kills {
        tokio::time::sleep(BEFORE_KILL).await;
        wait_stable(&client, group, &members, PARTITIONS, STABLE_TIMEOUT).await?;
        let owners_before: Vec<_> = members.iter().map(|m| m.view().assignment.clone()).collect();
        let lost_before: usize = members.iter().map(|m| m.view().lost).sum();
        let (node, _) = client.find_coordinator(Coordinator::Group, group).await.context("FindCoordinator")?;
        deployment.rill()?.kill(node)?;
        let killed_at = Instant::now();
        let probe = tokio::spawn(probe_coordinator(probe_client.clone(), group, node, killed_at + COMMIT_DEADLINE));

        // Per member: the first successful commit called after the kill.
        let deadline = killed_at + COMMIT_DEADLINE;
        let mut commit_ms: Vec<Option<f64>> = vec![None; members.len()];
        while commit_ms.iter().any(Option::is_none) && Instant::now() < deadline {
            for (i, m) in members.iter().enumerate() {
                if commit_ms[i].is_none() {
                    let v = m.view();
                    if let Some(c) = v.commits.iter().find(|c| c.started >= killed_at) {
                        commit_ms[i] = Some((c.done - killed_at).as_secs_f64() * 1000.0);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut failed_commits = Vec::new();
        let mut first_failure: Option<(Instant, String)> = None;
        for (i, m) in members.iter().enumerate() {
            let v = m.view();
            let until = commit_ms[i].map_or(deadline, |ms| killed_at + Duration::from_secs_f64(ms / 1000.0));
            let failures: Vec<&(Instant, String)> =
                v.failed_commits.iter().filter(|(at, _)| *at >= killed_at && *at <= until).collect();
            failed_commits.push(failures.len());
            if let Some((at, why)) = failures.first() {
                if first_failure.as_ref().is_none_or(|(t, _)| at < t) {
                    first_failure = Some((*at, why.clone()));
                }
            }
        }
        let new_coordinator = client.find_coordinator(Coordinator::Group, group).await.ok().map(|(n, _)| n);
        let (elected, serving) = probe.await.context("the coordinator probe")?;
        let since_kill = |t: Option<Instant>| t.map(|t| (t - killed_at).as_secs_f64() * 1000.0);
        let shown: Vec<String> = commit_ms.iter().map(|m| m.map_or("none".into(), |ms| format!("{ms:.0}"))).collect();
        eprintln!(
            "  kill {k} of {kills}: coordinator node {node} killed; next commit per member: {} ms",
            shown.join(", ")
        );

        // Back to three nodes, settled leaders and a stable group before the next kill.
        let cluster = deployment.rill()?;
        cluster.start_node(node)?;
        cluster.wait_ready(READY_TIMEOUT).await?;
        wait_settled_leaders(&client, &[topic, CONSUMER_OFFSETS], SETTLE_TIMEOUT).await?;
        wait_stable(&client, group, &members, PARTITIONS, STABLE_TIMEOUT).await?;
        let owners_after: Vec<_> = members.iter().map(|m| m.view().assignment.clone()).collect();
        let moved =
            owners_before.iter().zip(&owners_after).map(|(before, after)| before.difference(after).count()).sum();
        let lost = members.iter().map(|m| m.view().lost).sum::<usize>() - lost_before;
        results.push(CoordinatorKill {
            node,
            new_coordinator,
            elected_ms: since_kill(elected),
            serving_ms: since_kill(serving),
            commit_ms,
            failed_commits,
            first_failure: first_failure.map(|(_, why)| why),
            lost,
            moved,
        });
        deployment.check_running()?;
    }
    let totals = producer.stop().await?;
    let views = stop_all(members).await?;
    let all: Vec<f64> = results.iter().flat_map(|k| k.commit_ms.iter().map(|m| m.unwrap_or(f64::INFINITY))).collect();
    let result = GroupFailoverResult {
        members: MEMBERS,
        heartbeat_interval_ms: heartbeat_interval.as_millis() as u64,
        commit_ms_min: all.iter().copied().fold(f64::INFINITY, f64::min),
        commit_ms_median: median(&all),
        commit_ms_max: all.iter().copied().fold(0.0, f64::max),
        lost_partitions: views.iter().map(|v| v.lost).sum(),
        kills: results,
        load_msgs_per_sec: totals.msgs_per_sec,
        load_errors: totals.errors,
    };
    crate::scenarios::finish(deployment, "group-failover", &result);
    Ok(result)
}

/// Polls every 5 ms until `deadline`: when `FindCoordinator` first names a node other than
/// `killed`, and when that coordinator first answers `DescribeGroup` for `group`.
async fn probe_coordinator(
    client: Client,
    group: &'static str,
    killed: u64,
    deadline: Instant,
) -> (Option<Instant>, Option<Instant>) {
    let mut elected = None;
    while Instant::now() < deadline {
        if elected.is_none() {
            if let Ok((node, _)) = client.find_coordinator(Coordinator::Group, group).await {
                if node != killed {
                    elected = Some(Instant::now());
                }
            }
        }
        if elected.is_some() && client.describe_group(group).await.is_ok() {
            return (elected, Some(Instant::now()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (elected, None)
}
