//! Workload descriptions, with the OpenMessaging Benchmark's field names so a workload file from
//! `openmessaging/benchmark/workloads/` reads the same here.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// How producers choose message keys (OpenMessaging's `keyDistributor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum KeyDistributor {
    /// No key: the system spreads messages itself (Rill: sticky partitioner).
    #[default]
    NoKey,
    /// Keys cycle through a fixed set, one per partition's worth.
    KeyRoundRobin,
    /// A fresh random key per message.
    RandomNano,
}

/// One workload. Unknown fields are refused so a typo is not silently a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    /// Name used in reports (defaults to the file stem).
    #[serde(default)]
    pub name: String,
    /// Number of topics.
    #[serde(default = "one")]
    pub topics: u32,
    /// Partitions per topic (peers without partitions use one stream or queue per topic).
    #[serde(default = "one")]
    pub partitions_per_topic: u32,
    /// Message payload size in bytes (at least 16: the first bytes carry the send time).
    pub message_size: usize,
    /// Key choice.
    #[serde(default)]
    pub key_distributor: KeyDistributor,
    /// Subscriptions per topic (each reads every message).
    #[serde(default = "one")]
    pub subscriptions_per_topic: u32,
    /// Consumers per subscription.
    #[serde(default = "one")]
    pub consumer_per_subscription: u32,
    /// Producers per topic.
    #[serde(default = "one")]
    pub producers_per_topic: u32,
    /// Total target rate in messages per second over all producers; 0 = as fast as possible.
    #[serde(default)]
    pub producer_rate: u64,
    /// When above zero, consumers wait until this much is produced, then read the backlog from
    /// the start: the consumer catch-up rate.
    #[serde(default, rename = "consumerBacklogSizeGB")]
    pub consumer_backlog_size_gb: f64,
    /// Test length in minutes (OpenMessaging's unit); `--duration` overrides it.
    #[serde(default = "one_f64")]
    pub test_duration_minutes: f64,
    /// Messages each producer keeps awaiting acknowledgement (not an OpenMessaging field; the
    /// same for every system so the comparison is like for like).
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
}

fn one() -> u32 {
    1
}

fn one_f64() -> f64 {
    1.0
}

fn default_in_flight() -> usize {
    1024
}

/// Smallest message: 8 bytes of send time, 8 of sequence number.
pub const MIN_MESSAGE_SIZE: usize = 16;

impl Workload {
    /// Reads a YAML workload file; the name defaults to the file stem.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut w: Workload =
            serde_yaml::from_str(&text).with_context(|| format!("{} is not a valid workload", path.display()))?;
        if w.name.is_empty() {
            w.name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        }
        w.validate().with_context(|| format!("{}", path.display()))?;
        Ok(w)
    }

    /// Refuses shapes the runner cannot honour.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.message_size < MIN_MESSAGE_SIZE {
            bail!("messageSize must be at least {MIN_MESSAGE_SIZE} bytes (it carries the send time)");
        }
        if self.message_size > 8 << 20 {
            bail!("messageSize above 8 MiB is not supported");
        }
        for (name, v) in [
            ("topics", self.topics),
            ("partitionsPerTopic", self.partitions_per_topic),
            ("producersPerTopic", self.producers_per_topic),
            ("subscriptionsPerTopic", self.subscriptions_per_topic),
            ("consumerPerSubscription", self.consumer_per_subscription),
        ] {
            if v == 0 || v > 10_000 {
                bail!("{name} must be between 1 and 10000, got {v}");
            }
        }
        if self.max_in_flight == 0 {
            bail!("maxInFlight must be at least 1");
        }
        if !(self.consumer_backlog_size_gb >= 0.0 && self.consumer_backlog_size_gb < 1024.0) {
            bail!("consumerBacklogSizeGB must be between 0 and 1024");
        }
        if !(self.test_duration_minutes > 0.0 && self.test_duration_minutes <= 24.0 * 60.0) {
            bail!("testDurationMinutes must be above 0 and at most a day");
        }
        Ok(())
    }

    /// The test length.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.test_duration_minutes * 60.0)
    }

    /// Backlog size in bytes (0 when the workload has no catch-up phase).
    pub fn backlog_bytes(&self) -> u64 {
        (self.consumer_backlog_size_gb * (1u64 << 30) as f64) as u64
    }

    /// Producers over all topics.
    pub fn total_producers(&self) -> u32 {
        self.topics * self.producers_per_topic
    }

    /// A one-line description for reports: the shape and the rate.
    pub fn shape(&self) -> String {
        let rate = if self.producer_rate == 0 { "max".to_string() } else { format!("{} msg/s", self.producer_rate) };
        format!(
            "{}x{} partitions, {} B, {}p/{}c, {rate}",
            self.topics,
            self.partitions_per_topic,
            self.message_size,
            self.producers_per_topic,
            self.consumer_per_subscription * self.subscriptions_per_topic
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_openmessaging_field_names() -> anyhow::Result<()> {
        let w: Workload = serde_yaml::from_str(
            "name: 1-topic-16-partitions-1kb\ntopics: 1\npartitionsPerTopic: 16\nmessageSize: 1024\n\
             keyDistributor: KEY_ROUND_ROBIN\nsubscriptionsPerTopic: 1\nconsumerPerSubscription: 1\n\
             producersPerTopic: 1\nproducerRate: 50000\nconsumerBacklogSizeGB: 0\ntestDurationMinutes: 15\n",
        )?;
        w.validate()?;
        assert_eq!(w.partitions_per_topic, 16);
        assert_eq!(w.key_distributor, KeyDistributor::KeyRoundRobin);
        assert_eq!(w.producer_rate, 50_000);
        assert_eq!(w.duration(), Duration::from_secs(900));
        assert_eq!(w.max_in_flight, 1024);
        Ok(())
    }

    #[test]
    fn refuses_unknown_fields_and_bad_sizes() {
        assert!(serde_yaml::from_str::<Workload>("messageSize: 100\npartitions: 3\n").is_err());
        let w: Result<Workload, _> = serde_yaml::from_str("messageSize: 8\n");
        assert!(w.is_ok_and(|w| w.validate().is_err()));
        let w: Result<Workload, _> = serde_yaml::from_str("messageSize: 100\ntopics: 0\n");
        assert!(w.is_ok_and(|w| w.validate().is_err()));
    }

    #[test]
    fn every_shipped_workload_file_loads() -> anyhow::Result<()> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/workloads");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let w = Workload::load(&path)?;
                assert_eq!(Some(w.name.as_str()), path.file_stem().and_then(|s| s.to_str()), "{}", path.display());
                n += 1;
            }
        }
        assert!(n >= 5, "found only {n} workload files in {}", dir.display());
        Ok(())
    }
}
