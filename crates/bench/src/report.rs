//! The end-of-run table, Rill/peer ratios, and JSON output.

use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use crate::stats::RunResult;
use crate::systems::Variant;

fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// End-to-end latency is not measured when consumers read a backlog.
fn e2e(r: &RunResult, v: f64) -> String {
    if r.catch_up_msgs_per_sec.is_some() {
        "-".into()
    } else {
        num(v)
    }
}

/// The results table: one row per (system, workload).
pub fn table(results: &[RunResult]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "system",
        "workload",
        "msgs/s",
        "MB/s",
        "pub p50 ms",
        "pub p99 ms",
        "pub p99.9 ms",
        "pub max ms",
        "e2e p50 ms",
        "e2e p99 ms",
        "catch-up msg/s",
        "server CPU s",
        "errors",
    ]);
    for r in results {
        let cpu: f64 = r.server_cpu.iter().map(|c| c.cpu_seconds).sum();
        let cells = vec![
            Cell::new(&r.system),
            Cell::new(&r.workload),
            Cell::new(num(r.msgs_per_sec)).set_alignment(CellAlignment::Right),
            Cell::new(num(r.mb_per_sec)).set_alignment(CellAlignment::Right),
            Cell::new(num(r.publish_p50_ms)).set_alignment(CellAlignment::Right),
            Cell::new(num(r.publish_p99_ms)).set_alignment(CellAlignment::Right),
            Cell::new(num(r.publish_p999_ms)).set_alignment(CellAlignment::Right),
            Cell::new(num(r.publish_max_ms)).set_alignment(CellAlignment::Right),
            Cell::new(e2e(r, r.e2e_p50_ms)).set_alignment(CellAlignment::Right),
            Cell::new(e2e(r, r.e2e_p99_ms)).set_alignment(CellAlignment::Right),
            Cell::new(r.catch_up_msgs_per_sec.map(num).unwrap_or_else(|| "-".into()))
                .set_alignment(CellAlignment::Right),
            Cell::new(format!("{cpu:.1}")).set_alignment(CellAlignment::Right),
            Cell::new(r.errors).set_alignment(CellAlignment::Right),
        ];
        t.add_row(cells);
    }
    t.to_string()
}

/// One result per (system, workload): the run with the median throughput when the plan ran
/// several rounds. Keeps first-run order.
pub fn medians(results: Vec<RunResult>) -> Vec<RunResult> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in &results {
        let k = (r.system.clone(), r.workload.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter_map(|(system, workload)| {
            let mut runs: Vec<&RunResult> =
                results.iter().filter(|r| r.system == system && r.workload == workload).collect();
            runs.sort_by(|a, b| a.msgs_per_sec.total_cmp(&b.msgs_per_sec));
            runs.get(runs.len() / 2).map(|r| (*r).clone())
        })
        .collect()
}

/// What each system's acknowledgement means, and the client settings, under the table.
pub fn legend(results: &[RunResult]) -> String {
    let mut lines = vec!["systems (what an acknowledgement means):".to_string()];
    let mut seen = Vec::new();
    for r in results {
        if !seen.contains(&&r.system) {
            seen.push(&r.system);
            lines.push(format!("  {:<20} {}", r.system, r.durability));
        }
    }
    lines.push(
        "  Rill clients: idempotent producer, linger 1 ms, batches up to 1 MiB; peers: one stream/queue per topic; \
         every system: the same messages in flight per producer (maxInFlight)"
            .to_string(),
    );
    lines.join("\n")
}

/// Rill against one peer on one workload. A ratio above 1 favours Rill for every field
/// (latency ratios are peer / Rill).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Ratio {
    /// Workload.
    pub workload: String,
    /// Rill variant.
    pub rill: String,
    /// Peer variant.
    pub peer: String,
    /// Rill msgs/s ÷ peer msgs/s.
    pub throughput: f64,
    /// Peer publish p99 ÷ Rill publish p99.
    pub publish_p99: f64,
    /// Peer end-to-end p99 ÷ Rill end-to-end p99.
    pub e2e_p99: f64,
    /// Rill catch-up ÷ peer catch-up, where both were measured.
    pub catch_up: Option<f64>,
}

fn div(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Each Rill variant against each peer variant, per workload.
pub fn ratios(results: &[RunResult]) -> Vec<Ratio> {
    let is_rill = |r: &RunResult| Variant::parse(&r.system).map(|v| v.family() == "rill").unwrap_or(false);
    let mut out = Vec::new();
    for rill in results.iter().filter(|r| is_rill(r)) {
        for peer in results.iter().filter(|p| !is_rill(p) && p.workload == rill.workload) {
            out.push(Ratio {
                workload: rill.workload.clone(),
                rill: rill.system.clone(),
                peer: peer.system.clone(),
                throughput: div(rill.msgs_per_sec, peer.msgs_per_sec),
                publish_p99: div(peer.publish_p99_ms, rill.publish_p99_ms),
                e2e_p99: div(peer.e2e_p99_ms, rill.e2e_p99_ms),
                catch_up: match (rill.catch_up_msgs_per_sec, peer.catch_up_msgs_per_sec) {
                    (Some(a), Some(b)) => Some(div(a, b)),
                    _ => None,
                },
            });
        }
    }
    out
}

/// The ratios table (empty string when there are no peers).
pub fn ratio_table(ratios: &[Ratio]) -> String {
    if ratios.is_empty() {
        return String::new();
    }
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(vec!["workload", "rill", "peer", "throughput ×", "pub p99 ×", "e2e p99 ×", "catch-up ×"]);
    for r in ratios {
        t.add_row(vec![
            Cell::new(&r.workload),
            Cell::new(&r.rill),
            Cell::new(&r.peer),
            Cell::new(format!("{:.2}", r.throughput)).set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.2}", r.publish_p99)).set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.2}", r.e2e_p99)).set_alignment(CellAlignment::Right),
            Cell::new(r.catch_up.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into()))
                .set_alignment(CellAlignment::Right),
        ]);
    }
    format!("Rill / peer (above 1 favours Rill; latency ratios are peer ÷ Rill)\n{t}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(system: &str, workload: &str, rate: f64, p99: f64) -> RunResult {
        RunResult {
            system: system.into(),
            durability: String::new(),
            workload: workload.into(),
            shape: String::new(),
            seconds: 10.0,
            messages: (rate * 10.0) as u64,
            msgs_per_sec: rate,
            mb_per_sec: rate / 1000.0,
            errors: 0,
            publish_p50_ms: p99 / 2.0,
            publish_p99_ms: p99,
            publish_p999_ms: p99,
            publish_max_ms: p99,
            e2e_p50_ms: p99,
            e2e_p99_ms: p99,
            e2e_p999_ms: p99,
            e2e_max_ms: p99,
            consumed: 0,
            catch_up_msgs_per_sec: None,
            server_cpu: vec![],
            client_cpu_seconds: 0.0,
        }
    }

    #[test]
    fn ratios_pair_rill_with_peers_on_the_same_workload() {
        let results = vec![
            result("rill-acks-all-rf3", "w1", 50_000.0, 10.0),
            result("rabbitmq-quorum", "w1", 10_000.0, 40.0),
            result("redis-aof-always", "w2", 3_000.0, 5.0),
        ];
        let r = ratios(&results);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].peer, "rabbitmq-quorum");
        assert!((r[0].throughput - 5.0).abs() < 1e-9);
        assert!((r[0].publish_p99 - 4.0).abs() < 1e-9);
        assert!(table(&results).contains("50000"));
        assert!(ratio_table(&r).contains("5.00"));
    }
}
