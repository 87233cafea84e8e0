//! Latency histograms and the result of one (system, workload) run.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies in microseconds, 1 µs to 10 minutes at 3 significant digits.
#[derive(Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    // The bounds are constants within hdrhistogram's rules (low >= 1, high >= 2 * low,
    // sigfig <= 5), so construction cannot fail.
    #[allow(clippy::expect_used)]
    fn default() -> Self {
        Self(Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds are valid"))
    }
}

impl Latencies {
    /// Records one latency in microseconds (clamped into the histogram's range).
    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Latencies) {
        let _ = self.0.add(&other.0);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The latency at quantile `q` in milliseconds (0 with no samples).
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(q) as f64 / 1000.0
    }

    /// The largest latency in milliseconds.
    pub fn max_ms(&self) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.max() as f64 / 1000.0
    }

    /// p50/p99/p99.9/max, in milliseconds.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            p50_ms: self.quantile_ms(0.5),
            p99_ms: self.quantile_ms(0.99),
            p999_ms: self.quantile_ms(0.999),
            max_ms: self.max_ms(),
        }
    }
}

/// Latency quantiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// CPU seconds one server process (and its children) used during the measured phase.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProcessCpu {
    /// Process name (`rill-1`, `nats-2`, …).
    pub process: String,
    /// CPU seconds.
    pub cpu_seconds: f64,
}

/// One (system, workload) result: the `--output json` object.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunResult {
    /// System variant (`rill-acks-all-rf3`, `nats-r3-lazy`, …).
    pub system: String,
    /// What the variant promises at acknowledgement time.
    pub durability: String,
    /// Workload name.
    pub workload: String,
    /// Workload shape, for the reader.
    pub shape: String,
    /// Seconds of the measured produce phase.
    pub seconds: f64,
    /// Messages acknowledged in the measured phase.
    pub messages: u64,
    /// Acknowledged messages per second.
    pub msgs_per_sec: f64,
    /// Acknowledged payload megabytes (10^6) per second.
    pub mb_per_sec: f64,
    /// Sends that failed.
    pub errors: u64,
    /// Send → acknowledgement.
    pub publish_p50_ms: f64,
    /// Send → acknowledgement, 99th percentile.
    pub publish_p99_ms: f64,
    /// Send → acknowledgement, 99.9th percentile.
    pub publish_p999_ms: f64,
    /// Send → acknowledgement, largest.
    pub publish_max_ms: f64,
    /// Send → consumed.
    pub e2e_p50_ms: f64,
    /// Send → consumed, 99th percentile.
    pub e2e_p99_ms: f64,
    /// Send → consumed, 99.9th percentile.
    pub e2e_p999_ms: f64,
    /// Send → consumed, largest.
    pub e2e_max_ms: f64,
    /// Messages consumed (every subscription counted).
    pub consumed: u64,
    /// Messages per second read from a backlog (workloads with `consumerBacklogSizeGB`).
    pub catch_up_msgs_per_sec: Option<f64>,
    /// CPU seconds per server process during the measured phase.
    pub server_cpu: Vec<ProcessCpu>,
    /// CPU seconds the bench (client side) used during the measured phase.
    pub client_cpu_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_recorded_values() {
        let mut l = Latencies::default();
        assert_eq!(l.quantile_ms(0.99), 0.0);
        for us in 1..=1000u64 {
            l.record_us(us * 1000);
        }
        let s = l.summary();
        assert!((s.p50_ms - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_ms - 990.0).abs() < 1.0, "{s:?}");
        assert!((s.max_ms - 1000.0).abs() < 1.0, "{s:?}");
        let mut other = Latencies::default();
        other.record_us(2_000_000);
        l.merge(&other);
        assert_eq!(l.count(), 1001);
        assert!((l.max_ms() - 2000.0).abs() < 2.0);
    }
}
