//! The fault injector: faults drawn from the seed, one at a time, with quiet periods between.
//!
//! Each seed enables a random subset of the scenario's fault kinds (FoundationDB's "buggify":
//! a fault site is on in some runs and fires some of the time in those), then rotates through
//! them until the fault phase ends, and heals everything.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::Rng;
use rill_raft::NodeId;

use crate::cluster::SimCluster;
use crate::scenarios::FaultKind;
use crate::trace::Trace;

/// How many faults of each kind a run applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Counts by kind.
    pub by_kind: BTreeMap<String, u32>,
}

impl FaultCounts {
    fn add(&mut self, k: &str) {
        *self.by_kind.entry(k.to_string()).or_default() += 1;
    }

    /// The count for a summary column.
    pub fn get(&self, k: &str) -> u32 {
        self.by_kind.get(k).copied().unwrap_or(0)
    }
}

/// The summary column a fault kind is counted in.
pub fn column(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::Crash => "crash",
        FaultKind::PowerFail => "power",
        FaultKind::Pause => "pause",
        FaultKind::IsolateNode
        | FaultKind::MajoritySplit
        | FaultKind::Bridge
        | FaultKind::OneWay
        | FaultKind::ClientCut => "partition",
        FaultKind::PacketLoss => "loss",
        FaultKind::Delay => "delay",
    }
}

fn ms(rng: &mut impl Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.gen_range(lo..hi))
}

/// Picks the fault kinds this seed enables: each with probability 0.7, at least one.
pub fn enabled_faults(kinds: &[FaultKind]) -> Vec<FaultKind> {
    let mut rng = rill_rt::rng();
    let mut on: Vec<FaultKind> = kinds.iter().copied().filter(|_| rng.gen_bool(0.7)).collect();
    if on.is_empty() {
        if let Some(k) = kinds.choose(&mut rng) {
            on.push(*k);
        }
    }
    on
}

/// What a fault changed, so it can be undone.
enum Applied {
    Restart(Vec<NodeId>),
    Resume(NodeId),
    Network,
}

fn apply(cluster: &SimCluster, kind: FaultKind, rng: &mut impl Rng, trace: &Trace) -> Applied {
    let ids = cluster.ids();
    let pick = |rng: &mut dyn rand::RngCore| ids[rng.gen_range(0..ids.len())];
    match kind {
        FaultKind::Crash => {
            let n = pick(rng);
            trace.record(format!("fault crash node {n}"));
            cluster.kill(n);
            Applied::Restart(vec![n])
        }
        FaultKind::PowerFail => {
            let mut victims = ids.clone();
            victims.shuffle(rng);
            victims.truncate(rng.gen_range(1..=ids.len()));
            victims.sort_unstable();
            for v in &victims {
                let keep = rng.gen_range(0..=cluster.unsynced_batches(*v));
                trace.record(format!("fault power-fail node {v} keeping {keep} unsynced batches"));
                cluster.power_fail(*v, keep);
            }
            Applied::Restart(victims)
        }
        FaultKind::Pause => {
            let n = pick(rng);
            trace.record(format!("fault pause node {n}"));
            cluster.pause(n);
            Applied::Resume(n)
        }
        FaultKind::IsolateNode => {
            let n = pick(rng);
            trace.record(format!("fault isolate node {n} from the other servers"));
            for o in ids.iter().filter(|o| **o != n) {
                cluster.cut_link(n, *o);
                cluster.cut_link(*o, n);
            }
            Applied::Network
        }
        FaultKind::MajoritySplit => {
            let mut shuffled = ids.clone();
            shuffled.shuffle(rng);
            let minority_size = rng.gen_range(1..=(ids.len() - 1) / 2).max(1);
            let (minority, majority) = shuffled.split_at(minority_size);
            trace.record(format!("fault split minority {minority:?} from majority {majority:?}"));
            for a in minority {
                for b in majority {
                    cluster.cut_link(*a, *b);
                    cluster.cut_link(*b, *a);
                }
            }
            Applied::Network
        }
        FaultKind::Bridge => {
            let mut shuffled = ids.clone();
            shuffled.shuffle(rng);
            let bridge = shuffled[0];
            let rest = &shuffled[1..];
            let (left, right) = rest.split_at(rest.len() / 2);
            trace.record(format!("fault bridge {bridge} between {left:?} and {right:?}"));
            for a in left {
                for b in right {
                    cluster.cut_link(*a, *b);
                    cluster.cut_link(*b, *a);
                }
            }
            Applied::Network
        }
        FaultKind::OneWay => {
            let from = pick(rng);
            let others: Vec<NodeId> = ids.iter().copied().filter(|o| *o != from).collect();
            let to = others[rng.gen_range(0..others.len())];
            trace.record(format!("fault one-way link {from} -> {to} dropped"));
            cluster.cut_link(from, to);
            Applied::Network
        }
        FaultKind::ClientCut => {
            let n = pick(rng);
            trace.record(format!("fault clients cut from node {n}"));
            cluster.cut_clients(n);
            Applied::Network
        }
        FaultKind::PacketLoss => {
            let rate = rng.gen_range(0.02..0.3);
            trace.record(format!("fault packet loss {rate:.3}"));
            cluster.set_packet_loss(rate);
            Applied::Network
        }
        FaultKind::Delay => {
            let max = ms(rng, 200, 3000);
            trace.record(format!("fault delay up to {max:?}"));
            cluster.set_latency(Duration::from_millis(1)..max);
            Applied::Network
        }
    }
}

fn undo(cluster: &SimCluster, applied: Applied, trace: &Trace) {
    match applied {
        Applied::Restart(nodes) => {
            for n in nodes {
                trace.record(format!("heal restart node {n}"));
                cluster.restart(n);
            }
        }
        Applied::Resume(n) => {
            trace.record(format!("heal resume node {n}"));
            cluster.resume(n);
        }
        Applied::Network => {
            trace.record("heal network");
            cluster.heal_network();
        }
    }
}

/// Injects faults of the `enabled` kinds for `phase`, one at a time with quiet periods, then
/// heals everything. Returns what it applied.
pub async fn inject(cluster: &SimCluster, enabled: &[FaultKind], phase: Duration, trace: &Trace) -> FaultCounts {
    let mut counts = FaultCounts::default();
    let end = rill_rt::now() + phase;
    let mut rng = rill_rt::rng();
    loop {
        let quiet = ms(&mut rng, 300, 2500);
        if rill_rt::now() + quiet >= end || enabled.is_empty() {
            break;
        }
        rill_rt::sleep(quiet).await;
        let kind = enabled[rng.gen_range(0..enabled.len())];
        trace.record(format!("at {:?}:", madsim::time::TimeHandle::current().elapsed()));
        let applied = apply(cluster, kind, &mut rng, trace);
        counts.add(column(kind));
        // Pauses must outlast the lease plus election timeout (0.9-1.2 s by default) to matter.
        let hold = match kind {
            FaultKind::Pause => ms(&mut rng, 1500, 4000),
            _ => ms(&mut rng, 500, 4000),
        };
        let left = end.saturating_duration_since(rill_rt::now());
        rill_rt::sleep(hold.min(left)).await;
        undo(cluster, applied, trace);
    }
    cluster.heal_network();
    counts
}
