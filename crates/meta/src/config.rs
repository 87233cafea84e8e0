//! Per-topic configuration, validated once when a topic is created.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{MetaError, MetaErrorKind};

/// Default `max.message.bytes`: the largest record batch a topic accepts (Kafka's default).
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1024 * 1024 + 12;
/// Upper bound for `max.message.bytes`: a batch must fit in one gRPC message with headroom.
pub const MAX_MAX_MESSAGE_BYTES: u32 = 16 * 1024 * 1024;
/// Default `replica.lag.time.max.ms` (Kafka's default).
pub const DEFAULT_REPLICA_LAG_TIME_MAX: Duration = Duration::from_secs(30);
/// Smallest `replica.lag.time.max.ms`: below a few heartbeats every follower would flap.
pub const MIN_REPLICA_LAG_TIME_MAX: Duration = Duration::from_millis(500);

/// Settings of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// `min.insync.replicas`: acks=all writes are refused while the ISR is smaller.
    pub min_insync_replicas: u32,
    /// `max.message.bytes`: largest accepted record batch, in bytes.
    pub max_message_bytes: u32,
    /// `replica.lag.time.max.ms`: a follower that has not caught up with the leader's log end
    /// for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// `producer.id.expiration.ms`: an idempotent producer that sent nothing to a partition for
    /// this long is forgotten there (a later retry of its old batches is then refused).
    pub producer_id_expiration_ms: u64,
    /// `retention.ms`: records appended longer ago than this (by the leader's append time) are
    /// deleted; [`UNLIMITED`] keeps them.
    pub retention_ms: i64,
    /// `retention.bytes`: the oldest records are deleted while a partition holds more than this;
    /// [`UNLIMITED`] keeps them.
    pub retention_bytes: i64,
    /// `cleanup.policy`: whether old records are deleted (retention), compacted (only the
    /// newest record per key is kept), or both.
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: on a compacted topic, how long a tombstone (a record with a null
    /// value) is kept after compaction first passed it — the time a consumer reading from the
    /// start has to see the deletion.
    pub delete_retention_ms: u64,
    /// `min.compaction.lag.ms`: on a compacted topic, a record is kept as written for at
    /// least this long after its append, whatever newer records have its key.
    pub min_compaction_lag_ms: u64,
}

/// `cleanup.policy`: `delete`, `compact`, or both (`compact,delete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Records older or beyond what `retention.ms` / `retention.bytes` keep are deleted.
    pub delete: bool,
    /// Records superseded by a newer record with the same key are removed, and tombstones
    /// after `delete.retention.ms`.
    pub compact: bool,
}

impl CleanupPolicy {
    /// Kafka's default: delete by retention, no compaction.
    pub const DELETE: Self = Self { delete: true, compact: false };

    /// Reads Kafka's spelling: a comma-separated list of `delete` and `compact`.
    pub fn parse(value: &str) -> Result<Self, MetaError> {
        let mut policy = Self { delete: false, compact: false };
        for part in value.split(',') {
            match part.trim() {
                "delete" if !policy.delete => policy.delete = true,
                "compact" if !policy.compact => policy.compact = true,
                _ => {
                    return Err(invalid(format!(
                        "cleanup.policy must be delete, compact or compact,delete, got {value:?}"
                    )))
                }
            }
        }
        Ok(policy)
    }

    /// Kafka's spelling.
    pub fn as_str(self) -> &'static str {
        match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            _ => "delete",
        }
    }
}

/// Changes to a topic's settings, applied together and checked as one (Kafka's
/// `IncrementalAlterConfigs` operations). The list edits are resolved against the settings
/// as they are when the change applies, in the metadata's log order, so two concurrent appends
/// to `cleanup.policy` both land.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigEdits {
    /// Keys set to a value.
    pub set: Vec<(String, String)>,
    /// Keys returned to their defaults.
    pub reset: Vec<String>,
    /// Items added to a list setting (Kafka's APPEND; each item kept once). `cleanup.policy`
    /// is the one list a topic has.
    pub append: Vec<(String, String)>,
    /// Items removed from a list setting (Kafka's SUBTRACT).
    pub subtract: Vec<(String, String)>,
}

impl ConfigEdits {
    /// Setting and resetting only.
    pub fn new(set: Vec<(String, String)>, reset: Vec<String>) -> Self {
        Self { set, reset, append: Vec::new(), subtract: Vec::new() }
    }
}

/// The settings that are lists of items (comma-separated), to which items can be appended or
/// from which they can be subtracted.
pub const LIST_KEYS: [&str; 1] = ["cleanup.policy"];

/// The configuration keys a topic accepts.
pub const KEYS: [&str; 9] = [
    "min.insync.replicas",
    "max.message.bytes",
    "replica.lag.time.max.ms",
    "producer.id.expiration.ms",
    "retention.ms",
    "retention.bytes",
    "cleanup.policy",
    "delete.retention.ms",
    "min.compaction.lag.ms",
];

/// Default `delete.retention.ms`: one day, as Kafka.
pub const DEFAULT_DELETE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// `retention.ms` / `retention.bytes` value meaning "no limit" (Kafka's -1).
pub const UNLIMITED: i64 = -1;
/// Default `retention.ms`: seven days, as Kafka.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Largest `replica.lag.time.max.ms` a request may set: a dead follower holds `acks=all`
/// writes for up to this long before it leaves the ISR.
pub const MAX_REPLICA_LAG_TIME_MAX: Duration = Duration::from_secs(3600);
/// Largest `producer.id.expiration.ms` a request may set (30 days): producer state lives in
/// memory and in every snapshot for this long.
pub const MAX_PRODUCER_ID_EXPIRATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Default `producer.id.expiration.ms`: one day, as Kafka.
pub const DEFAULT_PRODUCER_ID_EXPIRATION: Duration = Duration::from_secs(24 * 3600);
/// Smallest `producer.id.expiration.ms`: shorter than a client's delivery timeout would forget
/// producers between their retries.
pub const MIN_PRODUCER_ID_EXPIRATION: Duration = Duration::from_secs(60);

impl TopicConfig {
    /// Defaults for a topic with `replication_factor` replicas: `min.insync.replicas` is a
    /// majority of the replicas (2 for RF 3), matching what Raft itself needs to commit.
    pub fn defaults(replication_factor: u32) -> Self {
        Self {
            min_insync_replicas: replication_factor / 2 + 1,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            replica_lag_time_max_ms: DEFAULT_REPLICA_LAG_TIME_MAX.as_millis() as u64,
            producer_id_expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION.as_millis() as u64,
            retention_ms: DEFAULT_RETENTION.as_millis() as i64,
            retention_bytes: UNLIMITED,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: DEFAULT_DELETE_RETENTION.as_millis() as u64,
            min_compaction_lag_ms: 0,
        }
    }

    /// Defaults overridden by `entries` (`key=value` pairs), validated against the replication
    /// factor. Unknown keys and bad values are refused with a message naming them.
    pub fn from_entries(replication_factor: u32, entries: &[(String, String)]) -> Result<Self, MetaError> {
        Self::defaults(replication_factor).altered(replication_factor, entries, &[])
    }

    /// This configuration with `edits` applied: the list edits resolved against this
    /// configuration's lists into values set, then [`Self::altered`]. A key may appear in one
    /// operation only; appending to or subtracting from a key that is not a list, or leaving a
    /// list empty, is refused.
    pub fn edited(&self, replication_factor: u32, edits: &ConfigEdits) -> Result<Self, MetaError> {
        if edits.append.is_empty() && edits.subtract.is_empty() {
            return self.altered(replication_factor, &edits.set, &edits.reset);
        }
        let mut lists: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (key, value, add) in
            edits.append.iter().map(|(k, v)| (k, v, true)).chain(edits.subtract.iter().map(|(k, v)| (k, v, false)))
        {
            check_key(key)?;
            if !LIST_KEYS.contains(&key.as_str()) {
                return Err(invalid(format!(
                    "{key} is not a list: only {} take items appended or subtracted; set it whole",
                    LIST_KEYS.join(", ")
                )));
            }
            let items = lists.entry(key.as_str()).or_insert_with(|| {
                self.list_value(key).split(',').filter(|i| !i.is_empty()).map(str::to_string).collect()
            });
            for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                if add {
                    if !items.iter().any(|i| i == item) {
                        items.push(item.to_string());
                    }
                } else {
                    items.retain(|i| i != item);
                }
            }
        }
        let mut set = edits.set.clone();
        for (key, items) in lists {
            if items.is_empty() {
                return Err(invalid(format!("{key} would be left empty: it needs at least one item")));
            }
            set.push((key.to_string(), items.join(",")));
        }
        self.altered(replication_factor, &set, &edits.reset)
    }

    /// The value of list setting `key` (one of [`LIST_KEYS`]) in Kafka's spelling.
    fn list_value(&self, key: &str) -> &'static str {
        match key {
            "cleanup.policy" => self.cleanup_policy.as_str(),
            _ => "",
        }
    }

    /// This configuration with `set` applied and the `reset` keys back at their defaults,
    /// validated as a whole.
    pub fn altered(
        &self,
        replication_factor: u32,
        set: &[(String, String)],
        reset: &[String],
    ) -> Result<Self, MetaError> {
        let defaults = Self::defaults(replication_factor);
        let mut config = self.clone();
        let mut seen = BTreeMap::new();
        for key in reset {
            check_key(key)?;
            if seen.insert(key.as_str(), ()).is_some() {
                return Err(invalid(format!("config key {key} is given twice")));
            }
            match key.as_str() {
                "min.insync.replicas" => config.min_insync_replicas = defaults.min_insync_replicas,
                "max.message.bytes" => config.max_message_bytes = defaults.max_message_bytes,
                "producer.id.expiration.ms" => config.producer_id_expiration_ms = defaults.producer_id_expiration_ms,
                "retention.ms" => config.retention_ms = defaults.retention_ms,
                "retention.bytes" => config.retention_bytes = defaults.retention_bytes,
                "cleanup.policy" => config.cleanup_policy = defaults.cleanup_policy,
                "delete.retention.ms" => config.delete_retention_ms = defaults.delete_retention_ms,
                "min.compaction.lag.ms" => config.min_compaction_lag_ms = defaults.min_compaction_lag_ms,
                _ => config.replica_lag_time_max_ms = defaults.replica_lag_time_max_ms,
            }
        }
        for (key, value) in set {
            check_key(key)?;
            if seen.insert(key.as_str(), ()).is_some() {
                return Err(invalid(format!("config key {key} is given twice")));
            }
            match key.as_str() {
                "min.insync.replicas" => config.min_insync_replicas = parse_u32(key, value)?,
                "max.message.bytes" => config.max_message_bytes = parse_u32(key, value)?,
                "producer.id.expiration.ms" => config.producer_id_expiration_ms = parse_ms(key, value)?,
                "retention.ms" => config.retention_ms = parse_limit(key, value, parse_ms)?,
                "retention.bytes" => config.retention_bytes = parse_limit(key, value, parse_bytes)?,
                "cleanup.policy" => config.cleanup_policy = CleanupPolicy::parse(value)?,
                "delete.retention.ms" => config.delete_retention_ms = parse_ms(key, value)?,
                "min.compaction.lag.ms" => config.min_compaction_lag_ms = parse_ms(key, value)?,
                _ => config.replica_lag_time_max_ms = parse_ms(key, value)?,
            }
        }
        config.validate(replication_factor)?;
        Ok(config)
    }

    /// Checks every value against its bounds.
    pub fn validate(&self, replication_factor: u32) -> Result<(), MetaError> {
        if self.min_insync_replicas == 0 || self.min_insync_replicas > replication_factor {
            return Err(invalid(format!(
                "min.insync.replicas must be between 1 and the replication factor ({replication_factor}), got {}",
                self.min_insync_replicas
            )));
        }
        if self.max_message_bytes == 0 || self.max_message_bytes > MAX_MAX_MESSAGE_BYTES {
            return Err(invalid(format!(
                "max.message.bytes must be between 1 and {MAX_MAX_MESSAGE_BYTES}, got {}",
                self.max_message_bytes
            )));
        }
        if self.replica_lag_time_max_ms < MIN_REPLICA_LAG_TIME_MAX.as_millis() as u64 {
            return Err(invalid(format!(
                "replica.lag.time.max.ms must be at least {}, got {}",
                MIN_REPLICA_LAG_TIME_MAX.as_millis(),
                self.replica_lag_time_max_ms
            )));
        }
        if self.producer_id_expiration_ms < MIN_PRODUCER_ID_EXPIRATION.as_millis() as u64 {
            return Err(invalid(format!(
                "producer.id.expiration.ms must be at least {}, got {}",
                MIN_PRODUCER_ID_EXPIRATION.as_millis(),
                self.producer_id_expiration_ms
            )));
        }
        Ok(())
    }

    /// The upper bounds a create or alter request must keep, on top of [`TopicConfig::validate`].
    ///
    /// Checked where requests enter (the admin API), not when the metadata log is applied: a
    /// bound added here must not refuse, on replay, a command an older release accepted, or
    /// replicas that replay the log would disagree with those that applied it before.
    pub fn check_request_bounds(&self) -> Result<(), MetaError> {
        let checks = [
            ("replica.lag.time.max.ms", self.replica_lag_time_max_ms, MAX_REPLICA_LAG_TIME_MAX),
            ("producer.id.expiration.ms", self.producer_id_expiration_ms, MAX_PRODUCER_ID_EXPIRATION),
        ];
        for (key, value, max) in checks {
            if value > max.as_millis() as u64 {
                return Err(invalid(format!("{key} must be at most {}, got {value}", max.as_millis())));
            }
        }
        Ok(())
    }

    /// Every key with its effective value.
    pub fn entries(&self) -> Vec<(String, String)> {
        vec![
            ("min.insync.replicas".into(), self.min_insync_replicas.to_string()),
            ("max.message.bytes".into(), self.max_message_bytes.to_string()),
            ("replica.lag.time.max.ms".into(), self.replica_lag_time_max_ms.to_string()),
            ("producer.id.expiration.ms".into(), self.producer_id_expiration_ms.to_string()),
            ("retention.ms".into(), self.retention_ms.to_string()),
            ("retention.bytes".into(), self.retention_bytes.to_string()),
            ("cleanup.policy".into(), self.cleanup_policy.as_str().into()),
            ("delete.retention.ms".into(), self.delete_retention_ms.to_string()),
            ("min.compaction.lag.ms".into(), self.min_compaction_lag_ms.to_string()),
        ]
    }

    /// `retention.ms` as a duration; `None` when unlimited or when the cleanup policy does
    /// not delete (a `compact`-only topic keeps its newest value per key forever).
    pub fn retention(&self) -> Option<Duration> {
        if !self.cleanup_policy.delete {
            return None;
        }
        u64::try_from(self.retention_ms).ok().map(Duration::from_millis)
    }

    /// `retention.bytes`; `None` when unlimited or when the cleanup policy does not delete.
    pub fn retention_bytes(&self) -> Option<u64> {
        if !self.cleanup_policy.delete {
            return None;
        }
        u64::try_from(self.retention_bytes).ok()
    }

    /// True when the topic is compacted (`cleanup.policy` has `compact`): records must have
    /// keys, and only the newest record per key is kept below the cleaning point.
    pub fn compacted(&self) -> bool {
        self.cleanup_policy.compact
    }

    /// `replica.lag.time.max.ms` as a duration.
    pub fn replica_lag_time_max(&self) -> Duration {
        Duration::from_millis(self.replica_lag_time_max_ms)
    }
}

/// Keys Kafka users expect that Rill does not take, because taking them would promise what Rill
/// does not do: refused by name.
pub const RESERVED_KEYS: [&str; 1] = ["max.compaction.lag.ms"];

/// Kafka settings Rill behaves as with exactly one value: that value is taken (and not stored),
/// any other refused.
pub const FIXED_KEYS: [(&str, &str, &str); 3] = [
    ("message.timestamp.type", "CreateTime", "Rill keeps the producer's timestamps"),
    ("compression.type", "producer", "Rill stores every batch compressed as its producer compressed it"),
    ("unclean.leader.election.enable", "false", "a Rill leader is always elected from the in-sync replicas"),
];

/// Kafka settings that tune the layout of Kafka's segment files, which Rill does not have (its
/// units of deletion are the sparse index's intervals and the value log's segments, `[storage]
/// segment-bytes` per node, see `docs/storage.md`): taken with any well-formed value, without
/// effect, and not stored.
pub const STORAGE_LAYOUT_KEYS: [&str; 7] = [
    "segment.bytes",
    "segment.ms",
    "segment.jitter.ms",
    "segment.index.bytes",
    "index.interval.bytes",
    "file.delete.delay.ms",
    "preallocate",
];

/// Whether `key` is one Rill takes without storing ([`FIXED_KEYS`], [`STORAGE_LAYOUT_KEYS`]):
/// `None` when it is not; `Some(Ok)` when it is and `value` (`None`: a reset) is taken;
/// `Some(Err)` naming why the value is refused. Such settings are dropped where requests enter,
/// before anything reaches the metadata log, so a replica of any release applies the same
/// commands.
pub fn inert_setting(key: &str, value: Option<&str>) -> Option<Result<(), MetaError>> {
    if let Some(&(_, only, why)) = FIXED_KEYS.iter().find(|(k, _, _)| *k == key) {
        return Some(match value {
            Some(v) if v.trim() != only => Err(invalid(format!("{key} can only be {only} in Rill ({why}), got {v:?}"))),
            _ => Ok(()),
        });
    }
    if !STORAGE_LAYOUT_KEYS.contains(&key) {
        return None;
    }
    let well_formed = match (key, value.map(str::trim)) {
        (_, None) => true,
        ("preallocate", Some(v)) => v == "true" || v == "false",
        (_, Some(v)) => v.parse::<u64>().is_ok(),
    };
    Some(if well_formed {
        Ok(())
    } else {
        Err(invalid(format!(
            "{key} must be {}, got {value:?}",
            if key == "preallocate" { "true or false" } else { "a non-negative integer" }
        )))
    })
}

fn check_key(key: &str) -> Result<(), MetaError> {
    if KEYS.contains(&key) {
        return Ok(());
    }
    if RESERVED_KEYS.contains(&key) {
        return Err(invalid(format!(
            "{key} is not offered by Rill (compaction runs by the cleaning point, see docs/compaction.md); it is refused rather than ignored"
        )));
    }
    Err(invalid(format!("unknown topic config key {key:?}; known keys: {}", KEYS.join(", "))))
}

fn invalid(message: String) -> MetaError {
    MetaError::new(MetaErrorKind::InvalidConfig, message)
}

fn parse_u32(key: &str, value: &str) -> Result<u32, MetaError> {
    value.trim().parse().map_err(|_| invalid(format!("{key} must be a non-negative integer, got {value:?}")))
}

/// `-1` ([`UNLIMITED`]) or a non-negative value read by `parse`.
fn parse_limit(key: &str, value: &str, parse: fn(&str, &str) -> Result<u64, MetaError>) -> Result<i64, MetaError> {
    if value.trim() == "-1" {
        return Ok(UNLIMITED);
    }
    let v = parse(key, value)?;
    i64::try_from(v).map_err(|_| invalid(format!("{key} is too large: {value:?}")))
}

/// Bytes as a plain integer, or with a binary unit: `512KiB`, `10MiB`, `1GiB` (`k`, `m`, `g`
/// and the `KB`/`MB`/`GB` spellings mean the same powers of 1024, as in Kafka's tools).
fn parse_bytes(key: &str, value: &str) -> Result<u64, MetaError> {
    let v = value.trim();
    let bad =
        || invalid(format!("{key} must be a byte count like 1048576 or 1GiB, or -1 for unlimited, got {value:?}"));
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// Milliseconds as a plain integer, or a human duration such as `10s`.
fn parse_ms(key: &str, value: &str) -> Result<u64, MetaError> {
    let v = value.trim();
    if let Ok(ms) = v.parse::<u64>() {
        return Ok(ms);
    }
    humantime::parse_duration(v)
        .map(|d| d.as_millis() as u64)
        .map_err(|_| invalid(format!("{key} must be milliseconds or a duration like 10s, got {value:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_may_not_set_durations_beyond_their_upper_bounds() {
        let set = |k: &str, v: &str| TopicConfig::from_entries(3, &[(k.to_string(), v.to_string())]);
        let hour = MAX_REPLICA_LAG_TIME_MAX.as_millis().to_string();
        assert_eq!(set("replica.lag.time.max.ms", &hour).unwrap().check_request_bounds(), Ok(()));
        let too_long = set("replica.lag.time.max.ms", "3600001").unwrap().check_request_bounds().unwrap_err();
        assert!(too_long.message.contains("replica.lag.time.max.ms must be at most 3600000"), "{}", too_long.message);
        let forever = set("producer.id.expiration.ms", "8640000000").unwrap();
        assert!(forever.check_request_bounds().is_err());
        assert_eq!(TopicConfig::defaults(3).check_request_bounds(), Ok(()), "defaults are within bounds");
    }

    #[test]
    fn retention_takes_durations_byte_units_and_unlimited() {
        let d = TopicConfig::defaults(3);
        assert_eq!(d.retention(), Some(DEFAULT_RETENTION));
        assert_eq!(d.retention_bytes(), None);
        let c = TopicConfig::from_entries(3, &[kv("retention.ms", "2h"), kv("retention.bytes", "10MiB")]).unwrap();
        assert_eq!(c.retention_ms, 7_200_000);
        assert_eq!(c.retention_bytes(), Some(10 << 20));
        let c = TopicConfig::from_entries(3, &[kv("retention.ms", "-1"), kv("retention.bytes", "1g")]).unwrap();
        assert_eq!(c.retention(), None);
        assert_eq!(c.retention_bytes, 1 << 30);
        assert_eq!(TopicConfig::from_entries(3, &[kv("retention.bytes", "0")]).unwrap().retention_bytes(), Some(0));
        for bad in ["-2", "ten", "5XB", "99999999999999999999", "18014398509481984k"] {
            let e = TopicConfig::from_entries(3, &[kv("retention.bytes", bad)]).unwrap_err();
            assert_eq!(e.kind, MetaErrorKind::InvalidConfig, "{bad}: {e}");
        }
        assert!(TopicConfig::from_entries(3, &[kv("retention.ms", "-5")]).is_err());
        let reset = c.altered(3, &[], &["retention.ms".into(), "retention.bytes".into()]).unwrap();
        assert_eq!((reset.retention_ms, reset.retention_bytes), (d.retention_ms, d.retention_bytes));
        let e = TopicConfig::from_entries(3, &[kv("max.compaction.lag.ms", "1000")]).unwrap_err();
        assert!(e.message.contains("refused rather than ignored"), "{e}");
        // Inert settings are dropped before a command is made: the state machine never takes them.
        assert!(TopicConfig::from_entries(3, &[kv("segment.bytes", "1000")]).is_err());
    }

    #[test]
    fn inert_settings_are_taken_only_with_values_rill_honours() {
        let ok = |key: &str, value: Option<&str>| inert_setting(key, value).map(|r| r.is_ok());
        assert_eq!(ok("retention.ms", Some("5")), None, "a stored setting is not inert");
        assert_eq!(ok("no.such.key", Some("5")), None);
        assert_eq!(ok("max.compaction.lag.ms", Some("5")), None, "refused by name elsewhere");
        assert_eq!(ok("message.timestamp.type", Some("CreateTime")), Some(true));
        assert_eq!(ok("message.timestamp.type", Some("LogAppendTime")), Some(false));
        assert_eq!(ok("compression.type", Some("producer")), Some(true));
        assert_eq!(ok("compression.type", Some("zstd")), Some(false), "Rill never recompresses");
        assert_eq!(ok("unclean.leader.election.enable", Some("true")), Some(false));
        assert_eq!(ok("unclean.leader.election.enable", None), Some(true), "a reset");
        assert_eq!(ok("segment.bytes", Some("52428800")), Some(true));
        assert_eq!(ok("segment.ms", Some("-1")), Some(false));
        assert_eq!(ok("preallocate", Some("true")), Some(true));
        assert_eq!(ok("preallocate", Some("1")), Some(false));
        let e = inert_setting("compression.type", Some("gzip")).unwrap().unwrap_err();
        assert_eq!(e.kind, MetaErrorKind::InvalidConfig);
        assert!(e.message.contains("only be producer"), "{e}");
    }

    #[test]
    fn list_edits_append_each_item_once_and_never_leave_a_list_empty() {
        let c = TopicConfig::defaults(3);
        let edit = |append: &[&str], subtract: &[&str]| ConfigEdits {
            append: append.iter().map(|v| ("cleanup.policy".to_string(), v.to_string())).collect(),
            subtract: subtract.iter().map(|v| ("cleanup.policy".to_string(), v.to_string())).collect(),
            ..ConfigEdits::default()
        };
        let both = c.edited(3, &edit(&["compact", "delete,compact"], &[])).unwrap();
        assert_eq!(both.cleanup_policy.as_str(), "compact,delete");
        let compact = both.edited(3, &edit(&[], &["delete", "delete"])).unwrap();
        assert_eq!(compact.cleanup_policy.as_str(), "compact");
        let err = compact.edited(3, &edit(&[], &["compact"])).unwrap_err();
        assert!(err.to_string().contains("left empty"), "{err}");
        let err = c.edited(3, &edit(&["shred"], &[])).unwrap_err();
        assert!(err.to_string().contains("cleanup.policy"), "{err}");
        let not_a_list = ConfigEdits { append: vec![("retention.ms".into(), "1".into())], ..ConfigEdits::default() };
        assert!(c.edited(3, &not_a_list).unwrap_err().to_string().contains("not a list"));
        // A key in two operations at once is refused, as in Kafka.
        let twice = ConfigEdits { set: vec![("cleanup.policy".into(), "delete".into())], ..edit(&["compact"], &[]) };
        assert!(c.edited(3, &twice).unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn cleanup_policy_takes_kafkas_spellings_and_compact_only_keeps_everything() {
        let d = TopicConfig::defaults(3);
        assert_eq!((d.cleanup_policy, d.compacted()), (CleanupPolicy::DELETE, false));
        assert_eq!((d.delete_retention_ms, d.min_compaction_lag_ms), (86_400_000, 0));
        let c = TopicConfig::from_entries(
            3,
            &[kv("cleanup.policy", "compact"), kv("delete.retention.ms", "1s"), kv("min.compaction.lag.ms", "250")],
        )
        .unwrap();
        assert!(c.compacted());
        assert_eq!((c.delete_retention_ms, c.min_compaction_lag_ms), (1000, 250));
        assert_eq!((c.retention(), c.retention_bytes()), (None, None), "compact alone deletes nothing by age or size");
        for spelling in ["compact,delete", "delete, compact"] {
            let c =
                TopicConfig::from_entries(3, &[kv("cleanup.policy", spelling), kv("retention.bytes", "1k")]).unwrap();
            assert_eq!(c.cleanup_policy, CleanupPolicy { delete: true, compact: true });
            assert_eq!(c.cleanup_policy.as_str(), "compact,delete");
            assert_eq!((c.retention(), c.retention_bytes()), (Some(DEFAULT_RETENTION), Some(1024)));
        }
        for bad in ["", "compact,compact", "remove", "compact;delete"] {
            let e = TopicConfig::from_entries(3, &[kv("cleanup.policy", bad)]).unwrap_err();
            assert!(e.message.contains("cleanup.policy must be"), "{bad}: {e}");
        }
        let back = c.altered(3, &[], &["cleanup.policy".into()]).unwrap();
        assert_eq!(back.cleanup_policy, CleanupPolicy::DELETE);
        let listed: Vec<String> = c.entries().into_iter().map(|(k, _)| k).collect();
        assert!(KEYS.iter().all(|k| listed.iter().any(|l| l == k)), "every key is listed");
    }

    fn kv(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn defaults_follow_the_replication_factor() {
        assert_eq!(TopicConfig::defaults(1).min_insync_replicas, 1);
        assert_eq!(TopicConfig::defaults(3).min_insync_replicas, 2);
        assert_eq!(TopicConfig::defaults(5).min_insync_replicas, 3);
    }

    #[test]
    fn accepts_overrides_and_durations() {
        let c = TopicConfig::from_entries(3, &[kv("min.insync.replicas", "3"), kv("replica.lag.time.max.ms", "2s")])
            .unwrap();
        assert_eq!(c.min_insync_replicas, 3);
        assert_eq!(c.replica_lag_time_max_ms, 2000);
    }

    #[test]
    fn refuses_bad_keys_and_values_with_a_message() {
        let e = TopicConfig::from_entries(3, &[kv("min.isr", "2")]).unwrap_err();
        assert!(e.message.contains("unknown topic config key"), "{e}");
        let e = TopicConfig::from_entries(3, &[kv("min.insync.replicas", "4")]).unwrap_err();
        assert!(e.message.contains("between 1 and the replication factor (3)"), "{e}");
        let e = TopicConfig::from_entries(3, &[kv("max.message.bytes", "lots")]).unwrap_err();
        assert_eq!(e.kind, MetaErrorKind::InvalidConfig);
        let e =
            TopicConfig::from_entries(3, &[kv("max.message.bytes", "1"), kv("max.message.bytes", "2")]).unwrap_err();
        assert!(e.message.contains("twice"));
    }
}
