//! `group-rebalance`: what a member joining a busy group costs the group's processing, in
//! cooperative mode (the default: only partitions that move are revoked) and in eager mode
//! (every member revokes everything), measured in the same run on the same cluster.
//!
//! A steady producer writes `rate` records per second round-robin over 6 partitions; members
//! (each a `Consumer` in subscribe mode in its own task, processing = recording partition,
//! offset and receive time) join one at a time, up to `max_members`. Member *n* + 1 joins
//! `join_after` + φ(*n*) × the heartbeat interval after the group became stable with *n*, where
//! φ(*n*) = frac(*n* × 0.618…) spreads the joins evenly over the phase of the members' heartbeats
//! (the same sequence in both modes). The phase matters: a member hears of a rebalance only at
//! its next heartbeat, and after a rebalance the members heartbeat nearly in step, so joins a
//! whole number of intervals after it would all find the others about to heartbeat (or just
//! done) and measure one phase only. Per join:
//!
//! * **time to stable**: from creating the new member's consumer to the group stable with it
//!   (see `super::wait_stable`);
//! * per partition, the **longest processing gap** overlapping the rebalance (from the join to
//!   stable): the longest time between two records of the partition that were new — never
//!   received before by any member, so a record delivered twice does not count as progress;
//! * its **normal gap**: the longest such gap in the steady stretch before the join (from 1 s
//!   after the previous join was stable to this join), which fetch batching alone produces;
//! * its **pause** = longest gap − normal gap (at least 0), reported separately for partitions
//!   that kept their owner through the join (the target: 0 in cooperative mode) and for those
//!   that moved to another member.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::member::{GroupMember, MemberOptions, Receipt};
use super::{create_topic, start_cluster, stop_all, wait_stable, SteadyProducer, STABLE_TIMEOUT};
use crate::systems::Env;

/// Partitions of the topic the members share.
pub const PARTITIONS: u32 = 6;
/// The steady stretch before a join starts this long after the previous join was stable, so
/// that the tail of the previous rebalance (a new owner catching up) is not taken as normal.
const BASELINE_SKIP: Duration = Duration::from_secs(1);
/// Records flow this long before the first member joins.
const WARMUP: Duration = Duration::from_secs(2);
/// The golden ratio's fractional part: successive multiples of it, modulo 1, spread evenly.
const PHASE_STEP: f64 = 0.618_033_988_749_895;

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct RebalanceSettings {
    /// Records per second, over all partitions.
    pub rate: u64,
    /// Members at the end (one joins at a time, from 1).
    pub max_members: usize,
    /// Least wait after the group is stable before the next member joins (plus a fraction of
    /// the heartbeat interval that differs per join, [`join_phase`]).
    pub join_after: Duration,
    /// The coordinator's heartbeat interval (`[groups] heartbeat-interval`).
    pub heartbeat_interval: Duration,
    /// How long each member's `poll` waits for records.
    pub poll_timeout: Duration,
}

/// The scenario's result: one run per rebalance mode.
#[derive(Debug, Clone, Serialize)]
pub struct RebalanceResult {
    /// Partitions of the topic.
    pub partitions: u32,
    /// Records per second the producer was asked for.
    pub rate: u64,
    /// Records per second it sent, per mode.
    pub sent_msgs_per_sec: Vec<f64>,
    /// The members' heartbeat interval, in ms.
    pub heartbeat_interval_ms: u64,
    /// The members' poll timeout, in ms.
    pub poll_timeout_ms: u64,
    /// Least wait between a stable group and the next join, in ms.
    pub join_after_ms: u64,
    /// Cooperative first, then eager.
    pub modes: Vec<ModeResult>,
}

/// One rebalance mode's joins.
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    /// "cooperative" or "eager".
    pub mode: String,
    /// One per member that joined, in order (the first join has no pauses: nothing was being
    /// processed before it).
    pub joins: Vec<JoinResult>,
    /// Records received more than once (at-least-once: a new owner starts at the last commit).
    pub duplicates: u64,
    /// Partitions a member's listener heard lost (a lost membership; expected 0).
    pub lost: usize,
    /// Partitions a member's listener heard revoked.
    pub revoked: usize,
    /// Records the producer failed to deliver.
    pub producer_errors: u64,
}

/// One join.
#[derive(Debug, Clone, Serialize)]
pub struct JoinResult {
    /// Members after the join.
    pub members: usize,
    /// How long after the group was stable without it the member joined, ms.
    pub joined_after_ms: f64,
    /// From creating the new member's consumer to a stable group, ms.
    pub stable_ms: f64,
    /// Partitions whose owner changed.
    pub moved: Vec<u32>,
    /// Largest pause of a partition that kept its owner, ms (`None`: none kept its owner).
    pub unmoved_pause_ms: Option<f64>,
    /// Largest pause of a partition that moved, ms (`None`: none moved).
    pub moved_pause_ms: Option<f64>,
    /// Every partition's numbers.
    pub partitions: Vec<PartitionPause>,
    /// Polls held up inside the consumer (revoking, or looking up committed offsets) during
    /// the rebalance: each member's owned partitions wait for them.
    pub slow_polls: Vec<SlowPoll>,
}

/// A `poll` that took well over its timeout.
#[derive(Debug, Clone, Serialize)]
pub struct SlowPoll {
    /// The member (index in join order).
    pub member: usize,
    /// When it started, ms after the join.
    pub at_ms: f64,
    /// How long it took, ms.
    pub ms: f64,
}

/// One partition through one join.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionPause {
    /// Partition.
    pub partition: u32,
    /// Its owner (member index, in join order) before and after the join.
    pub owner_before: Option<usize>,
    /// See `owner_before`.
    pub owner_after: Option<usize>,
    /// Longest gap between new records overlapping the rebalance, ms.
    pub longest_gap_ms: f64,
    /// When that gap began, ms after the join (negative: before it).
    pub gap_start_ms: f64,
    /// Longest gap in the steady stretch before the join, ms.
    pub normal_gap_ms: f64,
    /// `longest_gap_ms − normal_gap_ms`, at least 0.
    pub pause_ms: f64,
    /// Records of the partition the producer sent (by their create time) during that gap:
    /// about rate ÷ partitions per second of it when records waited on the way to the
    /// consumer; none when the producer itself stalled.
    pub sent_during_gap: usize,
}

/// Runs the joins in cooperative mode, then in eager mode, on one cluster.
pub async fn group_rebalance(env: &Env, settings: &RebalanceSettings) -> anyhow::Result<RebalanceResult> {
    let deployment = start_cluster(env, "rill-group-rebalance", settings.heartbeat_interval).await?;
    let mut modes = Vec::new();
    let mut sent_msgs_per_sec = Vec::new();
    for mode in ["cooperative", "eager"] {
        eprintln!("group-rebalance: {mode}");
        let (result, sent) = run_mode(&deployment, mode, settings).await?;
        modes.push(result);
        sent_msgs_per_sec.push(sent);
    }
    let result = RebalanceResult {
        partitions: PARTITIONS,
        rate: settings.rate,
        sent_msgs_per_sec,
        heartbeat_interval_ms: settings.heartbeat_interval.as_millis() as u64,
        poll_timeout_ms: settings.poll_timeout.as_millis() as u64,
        join_after_ms: settings.join_after.as_millis() as u64,
        modes,
    };
    crate::scenarios::finish(deployment, "group-rebalance", &result);
    Ok(result)
}

/// One mode: its own topic and group, members joining one by one.
async fn run_mode(
    deployment: &crate::systems::Deployment,
    mode: &str,
    settings: &RebalanceSettings,
) -> anyhow::Result<(ModeResult, f64)> {
    let client = rill_client::Client::connect(&deployment.endpoints).await?;
    let topic = format!("rebalance-{mode}");
    let group = format!("bench-{mode}");
    create_topic(&client, &topic, PARTITIONS).await?;
    let producer = SteadyProducer::start(&client, &topic, PARTITIONS, settings.rate);
    tokio::time::sleep(WARMUP).await;
    let t0 = Instant::now();
    let wall0_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let options = MemberOptions {
        group: group.clone(),
        topic,
        rebalance_mode: Some(mode.to_string()),
        commit_every_poll: false,
        poll_timeout: settings.poll_timeout,
    };
    let mut members: Vec<GroupMember> = Vec::new();
    // Per join: when the new member started, when the group was stable, who owned what then.
    let mut joins: Vec<(Instant, Instant, BTreeMap<u32, usize>)> = Vec::new();
    let last = settings.max_members.max(1);
    for n in 1..=last {
        let member = GroupMember::start(&deployment.endpoints, &options).await?;
        let started = member.started;
        members.push(member);
        let stable = wait_stable(&client, &group, &members, PARTITIONS, STABLE_TIMEOUT).await?;
        let owners = owners(&members);
        eprintln!("  {mode}: member {n} joined; stable after {:.0} ms", (stable - started).as_secs_f64() * 1000.0);
        joins.push((started, stable, owners));
        let phase = if n == last { 0.0 } else { join_phase(n + 1) };
        tokio::time::sleep(settings.join_after + settings.heartbeat_interval.mul_f64(phase)).await;
    }
    let observed_until = Instant::now();
    let totals = producer.stop().await?;
    let views = stop_all(members).await?;

    let secs = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    let receipts: Vec<Receipt> = views.iter().flat_map(|v| v.receipts.iter().copied()).collect();
    let (events, duplicates) = progress(&receipts, t0);
    // Each record's create time as seconds after t0 (the producer's clock is this machine's).
    let by_offset: BTreeMap<(u32, u64), i64> =
        receipts.iter().map(|r| ((r.partition, r.offset), r.created_ms)).collect();
    let mut created: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for ((partition, _), ms) in by_offset {
        created.entry(partition).or_default().push((ms as f64 - wall0_ms) / 1000.0);
    }
    let end = secs(observed_until);
    let mut results = Vec::new();
    for (i, (started, stable, owners_after)) in joins.iter().enumerate() {
        let stable_ms = (*stable - *started).as_secs_f64() * 1000.0;
        let Some((_, prev_stable, owners_before)) = i.checked_sub(1).and_then(|j| joins.get(j)) else {
            results.push(JoinResult {
                members: 1,
                joined_after_ms: 0.0,
                stable_ms,
                moved: Vec::new(),
                unmoved_pause_ms: None,
                moved_pause_ms: None,
                partitions: Vec::new(),
                slow_polls: Vec::new(),
            });
            continue;
        };
        let window = (secs(*started), secs(*stable));
        let baseline = (secs(*prev_stable + BASELINE_SKIP), secs(*started));
        let mut partitions = Vec::new();
        for p in 0..PARTITIONS {
            let mut times = events.get(&p).cloned().unwrap_or_default();
            // A partition that had not resumed by the end of observation is still paused.
            times.push(end);
            let (gap_start, longest) = longest_gap_overlapping(&times, window.0, window.1);
            let normal = longest_gap_within(&times, baseline.0, baseline.1);
            let sent_during_gap = created
                .get(&p)
                .map_or(0, |c| c.iter().filter(|t| **t > gap_start && **t < gap_start + longest).count());
            partitions.push(PartitionPause {
                sent_during_gap,
                partition: p,
                owner_before: owners_before.get(&p).copied(),
                owner_after: owners_after.get(&p).copied(),
                longest_gap_ms: longest * 1000.0,
                gap_start_ms: (gap_start - window.0) * 1000.0,
                normal_gap_ms: normal * 1000.0,
                pause_ms: (longest - normal).max(0.0) * 1000.0,
            });
        }
        let moved: Vec<u32> =
            partitions.iter().filter(|p| p.owner_before != p.owner_after).map(|p| p.partition).collect();
        let max_of = |moved_ones: bool| {
            partitions
                .iter()
                .filter(|p| (p.owner_before != p.owner_after) == moved_ones)
                .map(|p| p.pause_ms)
                .reduce(f64::max)
        };
        let slow_polls = views
            .iter()
            .enumerate()
            .flat_map(|(member, v)| {
                v.slow_polls.iter().map(move |(at, took)| SlowPoll {
                    member,
                    at_ms: (secs(*at) - window.0) * 1000.0,
                    ms: took.as_secs_f64() * 1000.0,
                })
            })
            .filter(|p| p.at_ms + p.ms >= 0.0 && p.at_ms <= (window.1 - window.0) * 1000.0)
            .collect();
        results.push(JoinResult {
            members: i + 1,
            joined_after_ms: (*started - *prev_stable).as_secs_f64() * 1000.0,
            stable_ms,
            slow_polls,
            unmoved_pause_ms: max_of(false),
            moved_pause_ms: max_of(true),
            moved,
            partitions,
        });
    }
    let result = ModeResult {
        mode: mode.to_string(),
        joins: results,
        duplicates,
        lost: views.iter().map(|v| v.lost).sum(),
        revoked: views.iter().map(|v| v.revoked).sum(),
        producer_errors: totals.errors,
    };
    Ok((result, totals.msgs_per_sec))
}

/// φ of the join that brings the group to `members` (2 or more): member *n* + 1 joins
/// `join_after` + φ × the heartbeat interval after the group was stable with *n*.
pub fn join_phase(members: usize) -> f64 {
    (members.saturating_sub(1) as f64 * PHASE_STEP).fract()
}

/// Who owns each partition (member index in join order), as the members see it.
fn owners(members: &[GroupMember]) -> BTreeMap<u32, usize> {
    let mut out = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        for p in &m.view().assignment {
            out.insert(*p, i);
        }
    }
    out
}

/// Per partition, the times (seconds after `t0`, ascending) at which a record never received
/// before was received, by any member; and how many receipts repeated an offset.
fn progress(receipts: &[Receipt], t0: Instant) -> (BTreeMap<u32, Vec<f64>>, u64) {
    let mut sorted: Vec<&Receipt> = receipts.iter().collect();
    sorted.sort_by_key(|r| r.at);
    let mut highest: BTreeMap<u32, u64> = BTreeMap::new();
    let mut events: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let mut duplicates = 0;
    for r in sorted {
        let new = highest.get(&r.partition).is_none_or(|h| r.offset > *h);
        if new {
            highest.insert(r.partition, r.offset);
            events.entry(r.partition).or_default().push(r.at.saturating_duration_since(t0).as_secs_f64());
        } else {
            duplicates += 1;
        }
    }
    (events, duplicates)
}

/// The longest interval between consecutive `times` (ascending) that overlaps `[from, to]`:
/// (its start, its length); (`from`, 0) when none does.
fn longest_gap_overlapping(times: &[f64], from: f64, to: f64) -> (f64, f64) {
    times.windows(2).filter(|w| w[0] < to && w[1] > from).map(|w| (w[0], w[1] - w[0])).fold((from, 0.0), |best, gap| {
        if gap.1 > best.1 {
            gap
        } else {
            best
        }
    })
}

/// The longest interval between consecutive `times` (ascending) lying within `[from, to]`.
fn longest_gap_within(times: &[f64], from: f64, to: f64) -> f64 {
    times.windows(2).filter(|w| w[0] >= from && w[1] <= to).map(|w| w[1] - w[0]).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_overlapping_and_within_a_window() {
        let times = [0.0, 0.1, 0.2, 1.5, 1.6, 3.0];
        // The gap 0.2–1.5 overlaps [1.0, 1.2] though it starts before it.
        let (start, gap) = longest_gap_overlapping(&times, 1.0, 1.2);
        assert!((start - 0.2).abs() < 1e-9 && (gap - 1.3).abs() < 1e-9);
        // Both 0.2–1.5 and 1.6–3.0 overlap [1.0, 2.0]: the longer counts.
        let (start, gap) = longest_gap_overlapping(&times, 1.0, 2.0);
        assert!((start - 1.6).abs() < 1e-9 && (gap - 1.4).abs() < 1e-9);
        assert!((longest_gap_within(&times, 0.0, 1.0) - 0.1).abs() < 1e-9);
        assert_eq!(longest_gap_within(&times, 0.05, 0.15), 0.0);
    }

    #[test]
    fn progress_counts_each_offset_once_whoever_received_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let receipts = [
            Receipt { partition: 0, offset: 0, at: at(0), created_ms: 0 },
            Receipt { partition: 0, offset: 1, at: at(10), created_ms: 0 },
            // A new owner starting at the last commit (offset 1) receives it again, later.
            Receipt { partition: 0, offset: 1, at: at(500), created_ms: 0 },
            Receipt { partition: 0, offset: 2, at: at(510), created_ms: 0 },
            Receipt { partition: 1, offset: 0, at: at(5), created_ms: 0 },
        ];
        let (events, duplicates) = progress(&receipts, t0);
        assert_eq!(duplicates, 1);
        assert_eq!(events[&0].len(), 3);
        assert!((events[&0][2] - 0.51).abs() < 1e-9);
        assert_eq!(events[&1].len(), 1);
    }
}
