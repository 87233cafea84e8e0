//! The group scenarios' results as text: the rebalance joins side by side per mode, with
//! eager/cooperative ratios of medians; the failover kills; the heartbeat CPU.

use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};

use super::failover::GroupFailoverResult;
use super::heartbeats::HeartbeatsResult;
use super::median;
use super::rebalance::{join_phase, ModeResult, RebalanceResult};

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"))
}

fn right(text: String) -> Cell {
    Cell::new(text).set_alignment(CellAlignment::Right)
}

/// One row per join with its phase; per mode: time to stable, the largest pause of a partition
/// that kept its owner and of one that moved, and how many moved. Then medians and eager/cooperative ratios.
pub fn group_rebalance_table(r: &RebalanceResult) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    let mut header = vec!["members".to_string(), "phase".to_string()];
    for m in &r.modes {
        let mode = if m.mode == "cooperative" { "coop" } else { m.mode.as_str() };
        for col in ["stable", "kept pause", "moved pause", "moved"] {
            header.push(format!("{mode} {col}"));
        }
    }
    t.set_header(header);
    let joins = r.modes.iter().map(|m| m.joins.len()).max().unwrap_or(0);
    for j in 0..joins {
        let phase = if j == 0 { "-".to_string() } else { format!("{:.2}", join_phase(j + 1)) };
        let mut row = vec![right(format!("{}", j + 1)), right(phase)];
        for m in &r.modes {
            match m.joins.get(j) {
                Some(join) => {
                    row.push(right(format!("{:.0}", join.stable_ms)));
                    row.push(right(ms(join.unmoved_pause_ms)));
                    row.push(right(ms(join.moved_pause_ms)));
                    row.push(right(if j == 0 { "-".into() } else { join.moved.len().to_string() }));
                }
                None => row.extend((0..4).map(|_| right("-".into()))),
            }
        }
        t.add_row(row);
    }
    let mut out = format!(
        "group-rebalance: {} partitions, {} records/s asked ({} sent), heartbeat interval {} ms, poll timeout {} ms, \
         next join {} ms + phase × interval after stable; times in ms, pauses are the largest of \
         partitions that kept their owner / moved\n{t}",
        r.partitions,
        r.rate,
        r.sent_msgs_per_sec.iter().map(|s| format!("{s:.0}")).collect::<Vec<_>>().join(" / "),
        r.heartbeat_interval_ms,
        r.poll_timeout_ms,
        r.join_after_ms,
    );
    for m in &r.modes {
        let s = summary(m);
        out.push_str(&format!(
            "\n{}: median stable {:.0} ms; unmoved pause max {:.0} ms, median {:.0} ms; moved pause median {:.0} ms; \
             {} duplicates, {} partitions revoked, {} lost, {} producer errors",
            m.mode,
            s.stable,
            s.unmoved_max,
            s.unmoved_median,
            s.moved_median,
            m.duplicates,
            m.revoked,
            m.lost,
            m.producer_errors
        ));
    }
    if let (Some(c), Some(e)) =
        (r.modes.iter().find(|m| m.mode == "cooperative"), r.modes.iter().find(|m| m.mode == "eager"))
    {
        let (c, e) = (summary(c), summary(e));
        let ratio = |e: f64, c: f64| if c > 0.0 { format!("{:.2}", e / c) } else { "n/a (cooperative 0)".into() };
        out.push_str(&format!(
            "\neager / cooperative (medians over joins 2..): stable {}; moved pause {}; unmoved pause {}",
            ratio(e.stable_later, c.stable_later),
            ratio(e.moved_median, c.moved_median),
            ratio(e.unmoved_median, c.unmoved_median)
        ));
    }
    out
}

struct Summary {
    /// Median time to stable over every join.
    stable: f64,
    /// The same over joins into a busy group (2 and later).
    stable_later: f64,
    unmoved_max: f64,
    unmoved_median: f64,
    moved_median: f64,
}

fn summary(m: &ModeResult) -> Summary {
    let later = m.joins.iter().skip(1);
    let unmoved: Vec<f64> = later.clone().filter_map(|j| j.unmoved_pause_ms).collect();
    let moved: Vec<f64> = later.clone().filter_map(|j| j.moved_pause_ms).collect();
    Summary {
        stable: median(&m.joins.iter().map(|j| j.stable_ms).collect::<Vec<_>>()),
        stable_later: median(&later.map(|j| j.stable_ms).collect::<Vec<_>>()),
        unmoved_max: unmoved.iter().copied().fold(0.0, f64::max),
        unmoved_median: median(&unmoved),
        moved_median: median(&moved),
    }
}

/// One line per kill, then min/median/max.
pub fn group_failover_summary(f: &GroupFailoverResult) -> String {
    let mut out = format!(
        "group-failover: {} members committing after every poll (heartbeat interval {} ms, load {:.0} msg/s, {} failed sends)",
        f.members, f.heartbeat_interval_ms, f.load_msgs_per_sec, f.load_errors
    );
    for (i, k) in f.kills.iter().enumerate() {
        let per: Vec<String> = k.commit_ms.iter().map(|m| ms(*m)).collect();
        out.push_str(&format!(
            "\n  kill {}: coordinator node {} → node {} (named after {} ms, serving after {} ms): kill → next commit {} ms; \
             failed commits {:?}; lost {}, moved {}{}",
            i + 1,
            k.node,
            k.new_coordinator.map_or("?".into(), |n| n.to_string()),
            ms(k.elected_ms),
            ms(k.serving_ms),
            per.join(", "),
            k.failed_commits,
            k.lost,
            k.moved,
            k.first_failure.as_ref().map(|w| format!(" (first failure: {w})")).unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "\n  kill → next commit: min {:.0} / median {:.0} / max {:.0} ms; partitions lost {}",
        f.commit_ms_min, f.commit_ms_median, f.commit_ms_max, f.lost_partitions
    ));
    out
}

/// CPU per node idle and with the groups, and the load generator's.
pub fn group_heartbeats_summary(h: &HeartbeatsResult) -> String {
    let pct = |v: &[f64]| v.iter().map(|c| format!("{c:.1}%")).collect::<Vec<_>>().join(", ");
    format!(
        "group-heartbeats: {} groups × 3 = {} members ({}), heartbeat interval {} ms, stable after {:.1} s\n  \
         CPU per node over {:.0} s: idle {}; with the groups {}; load generator {:.1}%\n  \
         {:.0} heartbeats/s ({}), {} errors, {} rejoins; {} groups stable after",
        h.groups,
        h.members,
        h.members_are,
        h.heartbeat_interval_ms,
        h.settle_seconds,
        h.seconds,
        pct(&h.idle_cpu_percent_per_node),
        pct(&h.cpu_percent_per_node),
        h.generator_cpu_percent,
        h.heartbeats_per_sec,
        if h.held {
            "each held at the coordinator".to_string()
        } else {
            format!(
                "p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms",
                h.heartbeat_p50_ms, h.heartbeat_p99_ms, h.heartbeat_max_ms
            )
        },
        h.heartbeat_errors,
        h.rejoins,
        h.stable_groups_after
    )
}
