//! Watermarks (white-box): on every replica, within one process lifetime, the high watermark
//! never decreases and never exceeds the log end.

use std::collections::BTreeMap;

use super::Violation;

/// One observation of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkSample {
    /// Node id.
    pub node: u64,
    /// How many times the node had been restarted when sampled.
    pub incarnation: u32,
    /// Raft group.
    pub group: u64,
    /// High watermark.
    pub high_watermark: u64,
    /// Log end (committed or not).
    pub log_end: u64,
}

/// Checks samples given in time order.
pub fn check(samples: &[WatermarkSample]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut last: BTreeMap<(u64, u32, u64), u64> = BTreeMap::new();
    for s in samples {
        if s.high_watermark > s.log_end {
            out.push(Violation {
                checker: "watermarks",
                detail: format!(
                    "node {} group {}: high watermark {} above log end {}",
                    s.node, s.group, s.high_watermark, s.log_end
                ),
            });
        }
        if let Some(prev) = last.insert((s.node, s.incarnation, s.group), s.high_watermark) {
            if s.high_watermark < prev {
                out.push(Violation {
                    checker: "watermarks",
                    detail: format!(
                        "node {} group {}: high watermark went back from {prev} to {}",
                        s.node, s.group, s.high_watermark
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(incarnation: u32, hw: u64, end: u64) -> WatermarkSample {
        WatermarkSample { node: 1, incarnation, group: 3, high_watermark: hw, log_end: end }
    }

    #[test]
    fn decrease_and_overshoot_are_caught() {
        assert_eq!(check(&[s(0, 5, 5), s(0, 4, 6)]).len(), 1);
        assert_eq!(check(&[s(0, 7, 6)]).len(), 1);
    }

    #[test]
    fn a_restart_may_start_lower() {
        assert!(check(&[s(0, 5, 5), s(1, 2, 5), s(1, 5, 5)]).is_empty());
    }
}
