//! Per-group configuration: how a share group treats its records (docs/queues.md). Kept in the
//! metadata, as Kafka keeps group configs in its metadata log, so that every node — the leader of
//! any partition a group reads — has them without asking anyone.
//!
//! Only the keys an operator set are stored; the rest are defaults, so a default that changes in
//! a later release applies to every group that did not choose otherwise. Values are checked when
//! a change applies, on every replica alike.

use std::collections::BTreeMap;

use crate::error::{MetaError, MetaErrorKind};

/// `share.record.lock.duration.ms` (Kafka's default: 30 s).
pub const DEFAULT_LOCK_MS: u64 = 30_000;
/// The shortest lock: below this, a lock runs out before a busy member's next fetch.
pub const MIN_LOCK_MS: u64 = 100;
/// The longest lock (Kafka's `group.share.max.record.lock.duration.ms` bound).
pub const MAX_LOCK_MS: u64 = 3_600_000;
/// `share.delivery.count.limit` (Kafka's default: 5).
pub const DEFAULT_DELIVERY_LIMIT: u16 = 5;
/// The most attempts a record may be given.
pub const MAX_DELIVERY_LIMIT: u16 = 1_000;
/// `share.partition.max.record.locks` (Kafka's default: 2,000).
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 2_000;
/// The most records in flight on one partition: the state a group keeps per partition (and in
/// every snapshot of it) is bounded by this.
pub const MAX_MAX_IN_FLIGHT: u32 = 100_000;
/// `share.member.max.record.locks`: one member's prefetch on one partition.
pub const DEFAULT_MAX_PER_MEMBER: u32 = 500;
/// `share.retry.backoff.max.ms` (Rill's default: 60 s).
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 60_000;
/// The longest delay before a record comes back (after an expiry or a release).
pub const MAX_DELAY_MS: u64 = 24 * 3_600_000;
/// `share.session.timeout.ms` (Kafka's default: 45 s).
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 45_000;
/// `share.heartbeat.interval.ms` (Kafka's default: 5 s).
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 5_000;
/// The longest a group id may be, in bytes.
pub const MAX_GROUP_ID_BYTES: usize = 255;

/// The keys a group accepts.
pub const KEYS: [&str; 11] = [
    "share.record.lock.duration.ms",
    "share.delivery.count.limit",
    "share.auto.offset.reset",
    "share.isolation.level",
    "share.partition.max.record.locks",
    "share.member.max.record.locks",
    "share.retry.backoff.ms",
    "share.retry.backoff.max.ms",
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
    DEAD_LETTER_TOPIC_KEY,
];

/// The group key naming the group's dead-letter topic (KIP-1191's name): records a member
/// rejects or that run out of attempts are copied there. Unset: none (they are only archived).
pub const DEAD_LETTER_TOPIC_KEY: &str = "errors.deadletterqueue.topic.name";

/// Where a share group starts reading a partition it has never read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    /// The oldest record the partition still has.
    Earliest,
    /// What is written from the group's first fetch on (Kafka's default).
    Latest,
}

/// A share group's settings, every key resolved (defaults for those not set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupConfig {
    /// `share.record.lock.duration.ms`: how long an acquired record stays with its member.
    pub lock_ms: u64,
    /// `share.delivery.count.limit`: attempts before a record is archived.
    pub delivery_limit: u16,
    /// `share.auto.offset.reset`: `latest` (default) or `earliest`.
    pub auto_offset_reset: AutoOffsetReset,
    /// `share.isolation.level`: `read_committed` (Rill's default, as everywhere in Rill) or
    /// `read_uncommitted` (Kafka's default for share groups).
    pub read_committed: bool,
    /// `share.partition.max.record.locks`: most records in flight on one partition.
    pub max_in_flight: u32,
    /// `share.member.max.record.locks`: most records one member holds on one partition.
    pub max_per_member: u32,
    /// `share.retry.backoff.ms`: the delay before a record whose lock ran out comes back after
    /// its first attempt, doubled after each further one (0: at once).
    pub backoff_initial_ms: u64,
    /// `share.retry.backoff.max.ms`: the longest such delay.
    pub backoff_max_ms: u64,
    /// `share.session.timeout.ms`: a member not heard from for this long leaves the group.
    pub session_timeout_ms: u64,
    /// `share.heartbeat.interval.ms`: how often members heartbeat.
    pub heartbeat_interval_ms: u64,
    /// `errors.deadletterqueue.topic.name`: the dead-letter topic, if the group has one.
    pub dead_letter_topic: Option<String>,
}

impl Default for ShareGroupConfig {
    fn default() -> Self {
        Self {
            lock_ms: DEFAULT_LOCK_MS,
            delivery_limit: DEFAULT_DELIVERY_LIMIT,
            auto_offset_reset: AutoOffsetReset::Latest,
            read_committed: true,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_per_member: DEFAULT_MAX_PER_MEMBER,
            backoff_initial_ms: 0,
            backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
            session_timeout_ms: DEFAULT_SESSION_TIMEOUT_MS,
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
            dead_letter_topic: None,
        }
    }
}

/// The keys a group's operator set, with their values as given (checked).
pub type GroupConfigEntries = BTreeMap<String, String>;

impl ShareGroupConfig {
    /// The settings `entries` make: defaults overridden by each key set, checked as a whole.
    /// Unknown keys and bad values are refused with a message naming them.
    pub fn from_entries(entries: &GroupConfigEntries) -> Result<Self, MetaError> {
        let mut c = Self::default();
        for (key, value) in entries {
            let v = value.trim();
            match key.as_str() {
                "share.record.lock.duration.ms" => c.lock_ms = parse(key, v, MIN_LOCK_MS, MAX_LOCK_MS)?,
                "share.delivery.count.limit" => {
                    c.delivery_limit = parse(key, v, 1, u64::from(MAX_DELIVERY_LIMIT))? as u16;
                }
                "share.auto.offset.reset" => {
                    c.auto_offset_reset = match v {
                        "latest" => AutoOffsetReset::Latest,
                        "earliest" => AutoOffsetReset::Earliest,
                        _ => return Err(invalid(format!("{key} must be latest or earliest, got {value:?}"))),
                    };
                }
                "share.isolation.level" => {
                    c.read_committed = match v {
                        "read_committed" => true,
                        "read_uncommitted" => false,
                        _ => {
                            return Err(invalid(format!(
                                "{key} must be read_committed or read_uncommitted, got {value:?}"
                            )))
                        }
                    };
                }
                "share.partition.max.record.locks" => {
                    c.max_in_flight = parse(key, v, 1, u64::from(MAX_MAX_IN_FLIGHT))? as u32;
                }
                "share.member.max.record.locks" => {
                    c.max_per_member = parse(key, v, 1, u64::from(MAX_MAX_IN_FLIGHT))? as u32;
                }
                "share.retry.backoff.ms" => c.backoff_initial_ms = parse(key, v, 0, MAX_DELAY_MS)?,
                "share.retry.backoff.max.ms" => c.backoff_max_ms = parse(key, v, 0, MAX_DELAY_MS)?,
                "share.session.timeout.ms" => c.session_timeout_ms = parse(key, v, 1_000, MAX_LOCK_MS)?,
                "share.heartbeat.interval.ms" => c.heartbeat_interval_ms = parse(key, v, 100, MAX_LOCK_MS)?,
                DEAD_LETTER_TOPIC_KEY => {
                    if v.is_empty() {
                        return Err(invalid(format!("{key} must name a topic (reset the key for none)")));
                    }
                    c.dead_letter_topic = Some(v.to_string());
                }
                _ => return Err(invalid(format!("unknown group config key {key:?}; known keys: {}", KEYS.join(", ")))),
            }
        }
        if c.heartbeat_interval_ms >= c.session_timeout_ms {
            return Err(invalid(format!(
                "share.heartbeat.interval.ms ({}) must be below share.session.timeout.ms ({})",
                c.heartbeat_interval_ms, c.session_timeout_ms
            )));
        }
        Ok(c)
    }

    /// The settings stored entries make: like [`Self::from_entries`], but keys this release does
    /// not know (written by a newer one) are left out rather than refused, and stored values —
    /// checked when they were applied — never fail: what a reader of the metadata uses.
    pub fn from_stored(entries: &GroupConfigEntries) -> Self {
        let known: GroupConfigEntries = entries
            .iter()
            .filter(|(key, _)| KEYS.contains(&key.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self::from_entries(&known).unwrap_or_default()
    }

    /// Every key with its effective value, in [`KEYS`] order.
    pub fn entries(&self) -> Vec<(String, String)> {
        let reset = match self.auto_offset_reset {
            AutoOffsetReset::Latest => "latest",
            AutoOffsetReset::Earliest => "earliest",
        };
        let isolation = if self.read_committed { "read_committed" } else { "read_uncommitted" };
        [
            self.lock_ms.to_string(),
            self.delivery_limit.to_string(),
            reset.to_string(),
            isolation.to_string(),
            self.max_in_flight.to_string(),
            self.max_per_member.to_string(),
            self.backoff_initial_ms.to_string(),
            self.backoff_max_ms.to_string(),
            self.session_timeout_ms.to_string(),
            self.heartbeat_interval_ms.to_string(),
            self.dead_letter_topic.clone().unwrap_or_default(),
        ]
        .into_iter()
        .zip(KEYS)
        .map(|(value, key)| (key.to_string(), value))
        .collect()
    }
}

/// `entries` with `set` applied and the `reset` keys removed, checked as a whole: the entries to
/// store, and the settings they make. A key may appear once.
pub fn edit_entries(
    entries: &GroupConfigEntries,
    set: &[(String, String)],
    reset: &[String],
) -> Result<(GroupConfigEntries, ShareGroupConfig), MetaError> {
    let mut out = entries.clone();
    let mut seen = BTreeMap::new();
    for key in reset.iter().chain(set.iter().map(|(k, _)| k)) {
        if !KEYS.contains(&key.as_str()) {
            return Err(invalid(format!("unknown group config key {key:?}; known keys: {}", KEYS.join(", "))));
        }
        if seen.insert(key.as_str(), ()).is_some() {
            return Err(invalid(format!("config key {key} is given twice")));
        }
    }
    for key in reset {
        out.remove(key);
    }
    for (key, value) in set {
        out.insert(key.clone(), value.trim().to_string());
    }
    let config = ShareGroupConfig::from_entries(&out)?;
    Ok((out, config))
}

/// Checks a group id: 1 to [`MAX_GROUP_ID_BYTES`] bytes, no control characters.
pub fn check_group_id(group: &str) -> Result<(), MetaError> {
    if group.is_empty() || group.len() > MAX_GROUP_ID_BYTES || group.chars().any(char::is_control) {
        return Err(MetaError::new(
            MetaErrorKind::InvalidConfig,
            format!("a group id must be 1 to {MAX_GROUP_ID_BYTES} bytes without control characters, got {group:?}"),
        ));
    }
    Ok(())
}

fn parse(key: &str, value: &str, min: u64, max: u64) -> Result<u64, MetaError> {
    match value.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(invalid(format!("{key} must be an integer from {min} to {max}, got {value:?}"))),
    }
}

fn invalid(message: String) -> MetaError {
    MetaError::new(MetaErrorKind::InvalidConfig, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> GroupConfigEntries {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_are_kafkas_but_read_committed_and_every_key_round_trips() {
        let d = ShareGroupConfig::default();
        assert_eq!((d.lock_ms, d.delivery_limit, d.auto_offset_reset), (30_000, 5, AutoOffsetReset::Latest));
        assert!(d.read_committed);
        let set = entries(&[
            ("share.record.lock.duration.ms", "500"),
            ("share.delivery.count.limit", "3"),
            ("share.auto.offset.reset", "earliest"),
            ("share.isolation.level", "read_uncommitted"),
            ("share.partition.max.record.locks", "50"),
            ("share.member.max.record.locks", "10"),
            ("share.retry.backoff.ms", "100"),
            ("share.retry.backoff.max.ms", "1000"),
            ("share.session.timeout.ms", "6000"),
            ("share.heartbeat.interval.ms", "1000"),
            ("errors.deadletterqueue.topic.name", "orders.dlq"),
        ]);
        let c = ShareGroupConfig::from_entries(&set).unwrap();
        assert_eq!(c.entries().into_iter().collect::<GroupConfigEntries>(), set);
    }

    #[test]
    fn bad_keys_and_values_are_refused_with_their_names() {
        let refused = |pairs: &[(&str, &str)]| ShareGroupConfig::from_entries(&entries(pairs)).unwrap_err().message;
        assert!(refused(&[("share.lock", "1")]).contains("unknown group config key"));
        assert!(refused(&[("share.record.lock.duration.ms", "5")]).contains("from 100 to 3600000"));
        assert!(refused(&[("share.delivery.count.limit", "0")]).contains("share.delivery.count.limit"));
        assert!(refused(&[("share.auto.offset.reset", "none")]).contains("latest or earliest"));
        assert!(refused(&[(DEAD_LETTER_TOPIC_KEY, " ")]).contains("must name a topic"));
        assert!(refused(&[("share.heartbeat.interval.ms", "50000")]).contains("below share.session.timeout.ms"));
    }

    #[test]
    fn edits_set_and_reset_keys_and_refuse_a_key_twice() {
        let (stored, c) =
            edit_entries(&GroupConfigEntries::new(), &[("share.delivery.count.limit".into(), " 3 ".into())], &[])
                .unwrap();
        assert_eq!((stored.len(), c.delivery_limit), (1, 3));
        let (stored, c) = edit_entries(&stored, &[], &["share.delivery.count.limit".into()]).unwrap();
        assert_eq!((stored.len(), c.delivery_limit), (0, DEFAULT_DELIVERY_LIMIT));
        let twice = [("share.delivery.count.limit".to_string(), "3".to_string())];
        assert!(edit_entries(&stored, &twice, &["share.delivery.count.limit".into()]).is_err());
        assert!(check_group_id("").is_err() && check_group_id("a\nb").is_err() && check_group_id("jobs").is_ok());
    }
}
