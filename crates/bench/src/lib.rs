//! `rill bench`: OpenMessaging-style workloads against Rill and, in the same run, its peers
//! (NATS JetStream, RabbitMQ, Redis Streams), so every claim is a ratio measured on the same
//! machine at the same time.
//!
//! * [`workload`] — workload files with the OpenMessaging Benchmark's field names.
//! * [`systems`] — each system's set-ups ([`systems::Variant`]), how its processes start and
//!   stop, and its client driver.
//! * [`runner`] — one workload on one system: open-loop or max-rate producers, consumers,
//!   publish and end-to-end latency histograms, consumer catch-up, CPU per server process.
//! * [`scenarios`] — Rill-only measurements beyond throughput: idle partitions, leader
//!   failover, restart with a large log, compaction, a retention soak, follower catch-up.
//! * [`groups`] — Rill-only consumer group measurements: rebalance pauses (cooperative vs
//!   eager), coordinator failover to the next commit, CPU of many heartbeating groups.
//! * [`transactions`] — Rill-only: transactional producer throughput against the idempotent
//!   producer (commit every 10 / 100 / 1,000 records, every 100 ms), commit latency, and
//!   consume-transform-produce with a transaction per poll against send + synchronous commit
//!   (per poll of 500 records, and a record at a time).
//! * [`report`] — the table, the Rill/peer ratios, JSON.
//! * [`disk`] — keeps the data directory's file system from filling: a floor of free space,
//!   watched while a run writes, and the run's directories removed if it stops early.
//!
//! This is a measuring tool for real clusters on real clocks: it never runs under the
//! simulator, so it reads the clock and starts threads directly.
#![allow(clippy::disallowed_methods)]

pub mod disk;
pub mod driver;
pub mod groups;
pub mod process;
pub mod report;
pub mod runner;
pub mod scenarios;
pub mod stats;
pub mod systems;
pub mod transactions;
pub mod workload;

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::runner::RunSettings;
use crate::stats::RunResult;
use crate::systems::{Deployment, Env, Variant};
use crate::workload::Workload;

/// What one `rill bench` invocation runs.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// Workloads, each run on every system.
    pub workloads: Vec<Workload>,
    /// Systems in run order (variants sharing a deployment should be adjacent).
    pub variants: Vec<Variant>,
    /// Also run each max-rate workload at half of Rill's measured maximum (`@50%`).
    pub half_rate: bool,
    /// Repeat the whole plan, alternating systems each round.
    pub rounds: u32,
    /// Ports, data directory, binaries.
    pub env: Env,
    /// Duration and warm-up.
    pub settings: RunSettings,
}

/// Every result of a plan, in run order.
pub async fn run_plan(plan: &BenchPlan) -> anyhow::Result<Vec<RunResult>> {
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut results = Vec::new();
    for round in 1..=plan.rounds.max(1) {
        // The half-rate workloads derive from the first system's maximum in this round.
        let mut derived: Vec<Workload> = Vec::new();
        let mut i = 0;
        while i < plan.variants.len() {
            let kind = plan.variants[i].deployment();
            let group: Vec<Variant> =
                plan.variants[i..].iter().copied().take_while(|v| v.deployment() == kind).collect();
            i += group.len();
            eprintln!("starting {} ({})", group[0].family(), describe_group(&group));
            let mut deployment = Deployment::start(kind, &plan.env)
                .await
                .with_context(|| format!("cannot start the {} deployment", group[0].family()))?;
            for variant in group {
                let driver = variant.connect(&deployment, &plan.env).await?;
                let mut workloads = plan.workloads.clone();
                workloads.extend(derived.iter().cloned());
                let mut j = 0;
                while j < workloads.len() {
                    let workload = workloads[j].clone();
                    j += 1;
                    let run_id = format!("{stamp}-r{round}-{j}");
                    let result =
                        runner::run(driver.as_ref(), &mut deployment, variant, &workload, &plan.settings, &run_id)
                            .await
                            .with_context(|| format!("{} on {}", workload.name, variant.name()))?;
                    eprintln!(
                        "  {:<20} {:<34} {:>9.0} msg/s  publish p99 {:>8.2} ms  e2e p99 {:>8.2} ms",
                        variant.name(),
                        workload.name,
                        result.msgs_per_sec,
                        result.publish_p99_ms,
                        result.e2e_p99_ms
                    );
                    if plan.half_rate
                        && workload.producer_rate == 0
                        && workload.consumer_backlog_size_gb == 0.0
                        && !derived.iter().any(|d| d.name == half_name(&workload))
                    {
                        let half = Workload {
                            name: half_name(&workload),
                            producer_rate: (result.msgs_per_sec / 2.0).max(1.0) as u64,
                            ..workload.clone()
                        };
                        derived.push(half.clone());
                        workloads.push(half);
                    }
                    results.push(result);
                }
            }
        }
    }
    Ok(results)
}

fn half_name(w: &Workload) -> String {
    format!("{}@50%", w.name)
}

fn describe_group(group: &[Variant]) -> String {
    group.iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
}
