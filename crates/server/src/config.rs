//! Node configuration: one TOML file, then `RILL_*` environment variables, then flags.
//!
//! ```toml
//! node-id = 1
//! listen = "127.0.0.1:7001"           # the client listener: Records, Admin, Groups
//! # advertise = "10.0.0.1:7001"       # the address clients reach it at (default: listen)
//! internal-listen = "127.0.0.1:7101"  # the node-to-node listener: Raft, cluster RPCs
//! # kafka-listen = "127.0.0.1:9092"   # a Kafka wire-protocol listener (docs/kafka.md); off unset
//! # kafka-advertise = "10.0.0.1:9092" # the address Kafka clients reach it at (default: kafka-listen)
//! data-dir = "/var/lib/rill/1"
//!
//! [cluster]
//! # Founding members by their internal addresses (where the other nodes reach them).
//! members = ["1@127.0.0.1:7101", "2@127.0.0.1:7102", "3@127.0.0.1:7103"]
//! # join = true             # this node is not in `members`: join the running cluster
//! # internal-advertise = "10.0.0.4:7101"  # a joining node's address for the others
//! auto-leader-rebalance = true    # hand leadership back to preferred replicas
//!
//! [tls]  # mutual TLS between nodes, on the internal listener (docs/security.md)
//! ca = "/etc/rill/ca.pem"         # the cluster CA: peers' certificates must chain to it
//! cert = "/etc/rill/node-1.pem"   # this node's certificate, naming node-1
//! key = "/etc/rill/node-1.key"
//! # insecure-internal = true      # no TLS between nodes: experiments only (logs a warning)
//!
//! [raft]
//! heartbeat-interval = "100ms"
//! election-timeout-min = "300ms"
//! election-timeout-max = "600ms"
//! quiesce-after = "3s"  # idle partitions stop heartbeating; "0s": never
//!
//! [log]
//! level = "info"      # tracing filter, e.g. "info,rill_raft=debug"
//! format = "text"     # or "json"
//!
//! [storage]  # the value log (docs/storage.md); unset keys keep the engine's defaults
//! # segment-bytes = "128MiB"          # at least 1MiB
//! # gc-bytes-per-second = "128MiB"    # the value log collector's pace
//! # recovery-free-bytes = "64MiB"     # after a storage failure, restart once this much is writable
//!
//! [kafka]  # the Kafka listener (docs/kafka.md)
//! # max-request-bytes = "64MiB"   # a larger frame closes its connection before it is read
//! # auto-create-topics = false     # Metadata may create the unknown topics it names
//! # default-partitions = 1         # a topic created without a count (Kafka's num.partitions)
//!
//! [limits]  # what clients may make a node hold (docs/security.md)
//! # max-connections = 10000
//! # max-producers-per-partition = 10000   # producers remembered for deduplication
//! # producer-evictable-after = "2m"       # a full table forgets producers idle this long
//! ```
//!
//! Unknown keys are refused with their full path. Every key has an environment variable
//! (`RILL_NODE_ID`, `RILL_CLUSTER_MEMBERS`, `RILL_RAFT_HEARTBEAT_INTERVAL`, …) and a flag
//! (`--node-id`, `--cluster-members`, …); see [`Args`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rill_broker::producers::ProducerLimits;
use rill_raft::{NodeId, RaftTiming};
use serde::{Deserialize, Deserializer};

use crate::error::{Error, Result};

/// A validated node configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// This node's id (≥ 1; listed in `members`, unless `join` is set).
    pub node_id: NodeId,
    /// Address the client listener binds (the public services only).
    pub listen: SocketAddr,
    /// Address the internal listener binds (node-to-node services only).
    pub internal_listen: SocketAddr,
    /// Directory for this node's data.
    pub data_dir: PathBuf,
    /// Every voter of the cluster metadata group: id → its internal `host:port`.
    pub members: BTreeMap<NodeId, String>,
    /// True for a node that is not one of `members`: it joins the running cluster through
    /// them (see `docs/architecture.md`, "Adding a node").
    pub join: bool,
    /// The address clients reach this node at (its client listener).
    pub advertise: String,
    /// The address the other nodes reach this node at (its internal listener): its entry in
    /// `members`, or for a joining node `internal-advertise`.
    pub internal_advertise: String,
    /// The Kafka wire-protocol listener, when the node has one.
    pub kafka: Option<KafkaListener>,
    /// Hand leadership back to each partition's preferred replica once it is in sync again.
    pub auto_leader_rebalance: bool,
    /// Pace of preferred-leader balancing. Not settable from the file or flags; the simulation
    /// shortens it so its fault phases see hand-overs.
    pub rebalance_timing: RebalanceTiming,
    /// Raft timing.
    pub raft: RaftTiming,
    /// Log filter (`RUST_LOG` syntax).
    pub log_level: String,
    /// Log format.
    pub log_format: LogFormat,
    /// Artificial delay before every storage sync. Zero in real deployments; the simulation
    /// sets it to model a disk's fsync time. Not settable from the file or flags.
    pub sync_latency: Duration,
    /// Partitions of `__consumer_offsets` when the cluster creates it (at its first start;
    /// later changes have no effect: the count decides where groups live).
    pub consumer_offsets_partitions: u32,
    /// Partitions of `__transaction_state` when the cluster creates it.
    pub transaction_state_partitions: u32,
    /// A state partition (internal topic) snapshots after this many entries and purges its log
    /// behind the snapshot, keeping `state_log_kept_entries` before it. Neither is settable from
    /// the file or flags; the simulation lowers both so its runs purge and install snapshots.
    pub state_snapshot_every_entries: u64,
    /// See `state_snapshot_every_entries`.
    pub state_log_kept_entries: u64,
    /// A record partition whose log start offset moved snapshots (so that its log can be purged
    /// below it) at most this often. Not settable from the file or flags; the simulation lowers
    /// it so its runs purge record partitions and install their snapshots.
    pub record_purge_every: Duration,
    /// How the internal listener and the connections to peers are secured.
    pub internal_tls: InternalTls,
    /// What the client listener lets one client hold open.
    pub client_limits: ClientLimits,
    /// `[limits]`: how many producers a record partition remembers, and when a full table may
    /// forget an idle one.
    pub producer_limits: ProducerLimits,
    /// The storage engine's value log tuning.
    pub storage: StorageTuning,
    /// `[groups]`: consumer group members' session timeout and heartbeat interval.
    pub groups: rill_coordinator::groups::Timeouts,
    /// `[groups]`: how long an empty group keeps its committed offsets, and how often that is
    /// checked.
    pub offsets_retention: OffsetsRetention,
    /// `[transactions]`: how long a transactional id without an open transaction is kept
    /// unused, and how often that is checked.
    pub transactional_id_expiration: TransactionalIdExpiration,
}

/// The Kafka wire-protocol listener: where it binds, where Kafka clients reach it, and the
/// largest request frame it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaListener {
    /// Address it binds (`kafka-listen`).
    pub listen: SocketAddr,
    /// The address Kafka clients reach it at (`kafka-advertise`, default `kafka-listen`): what
    /// `Metadata` and `FindCoordinator` answer over the Kafka protocol.
    pub advertise: String,
    /// `[kafka] max-request-bytes`: a request frame declaring more closes its connection before
    /// any of it is read (Kafka's `socket.request.max.bytes`).
    pub max_request_bytes: u32,
    /// `[kafka] auto-create-topics` (default false): a `Metadata` request that allows it creates
    /// the unknown topics it names, with the cluster's defaults, when the caller may create them
    /// (Kafka's `auto.create.topics.enable`, whose default is true: off here, so that a typo in a
    /// topic name is an error rather than a new topic).
    pub auto_create_topics: bool,
    /// `[kafka] default-partitions` (default 1, Kafka's `num.partitions`): the partitions of a
    /// topic a Kafka client creates without a count (`CreateTopics` with -1, auto-creation).
    pub default_partitions: u32,
}

/// Default `[kafka] default-partitions` (Kafka's `num.partitions` default).
pub const DEFAULT_KAFKA_PARTITIONS: u32 = 1;
/// Largest `[kafka] default-partitions`.
pub const MAX_KAFKA_DEFAULT_PARTITIONS: u32 = 1_000;

/// Default `[kafka] max-request-bytes`: the largest request message the gRPC listener takes.
pub const DEFAULT_KAFKA_MAX_REQUEST_BYTES: u32 = rill_proto::MAX_GRPC_MESSAGE_BYTES as u32;
/// Smallest `[kafka] max-request-bytes`: a produce request of one default-sized batch (1 MiB).
pub const MIN_KAFKA_MAX_REQUEST_BYTES: u32 = 1 << 20;

/// `[groups] offsets-retention`, `offsets-retention-check-interval`: a group without members
/// loses each committed offset this long after the later of its commit and the moment the group
/// became empty (Kafka's `offsets.retention.ms`, KIP-211); a live group's offsets never expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetsRetention {
    /// Kafka's `offsets.retention.ms` (default 7 days).
    pub retention: Duration,
    /// Kafka's `offsets.retention.check.interval.ms` (default 10 minutes).
    pub check_every: Duration,
}

impl Default for OffsetsRetention {
    fn default() -> Self {
        Self { retention: Duration::from_secs(7 * 24 * 3600), check_every: Duration::from_secs(600) }
    }
}

/// `[transactions] transactional-id-expiration`, `transactional-id-expiration-check-interval`:
/// a transactional id with no transaction open and nothing written for it this long is removed
/// with its producer id (Kafka's `transactional.id.expiration.ms`), so the coordinators' state
/// does not grow with every id ever used. A producer that comes back later starts afresh under
/// a new producer id; one still holding the old pair is refused (`INVALID_PRODUCER_ID_MAPPING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionalIdExpiration {
    /// Kafka's `transactional.id.expiration.ms` (default 7 days).
    pub expiration: Duration,
    /// Kafka's `transactions.remove.expired.transaction.cleanup.interval.ms` (default 1 hour).
    pub check_every: Duration,
}

impl Default for TransactionalIdExpiration {
    fn default() -> Self {
        Self { expiration: Duration::from_secs(7 * 24 * 3600), check_every: Duration::from_secs(3600) }
    }
}

/// `[storage]`: the value log's tuning (docs/storage.md, "Space"). A key left unset keeps the
/// engine's default (`rill_storage_rocks::EngineConfig`), which this crate cannot name under the
/// simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageTuning {
    /// Value log segment size (`segment-bytes`; the engine's default is 128 MiB). Smaller
    /// segments give deleted bytes back sooner (only closed segments are collected, and the
    /// index is flushed at least once per segment) at the cost of more files, each kept open.
    pub segment_bytes: Option<u64>,
    /// Most bytes per second the value log collector reads and writes (`gc-bytes-per-second`;
    /// the engine's default is 128 MiB/s). It must exceed the rate deletes free space at, or
    /// garbage waits while that lasts.
    pub gc_bytes_per_second: Option<u64>,
    /// After a storage failure (a full disk, an I/O error), the node restarts itself from its
    /// durable state once its data directory takes a file of this many bytes, written and
    /// fsynced (`recovery-free-bytes`; [`DEFAULT_RECOVERY_FREE_BYTES`] when unset). See
    /// `crate::recovery`.
    pub recovery_free_bytes: Option<u64>,
}

/// Default `[storage] recovery-free-bytes`: room for what a restart writes before it serves
/// (a new value log segment, the index's flush of what it replayed: a few MiB) and for a
/// follower's first catch-up, so that a disk freed by a little does not fail again at once.
/// A node that fills it again fails safely and waits again.
pub const DEFAULT_RECOVERY_FREE_BYTES: u64 = 64 << 20;

/// Smallest `[storage] segment-bytes`: every segment is an open file, and a batch larger than a
/// segment gets one of its own, so much smaller segments would mean a file for nearly every
/// batch of a busy node; 1 MiB still lets a test see retention give disk back after a few MiB.
pub const MIN_SEGMENT_BYTES: u64 = 1 << 20;
/// Smallest `[storage] gc-bytes-per-second`: slower, a collector could not keep up with even an
/// idle node's background writes.
pub const MIN_GC_BYTES_PER_SECOND: u64 = 1 << 20;
/// Smallest `[storage] recovery-free-bytes`: a restart writes a segment header and flushes the
/// index before it serves, so a probe smaller than that would restart into a disk still full.
pub const MIN_RECOVERY_FREE_BYTES: u64 = 1 << 20;

/// Bounds on what clients may hold open on the client listener (`[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Open client connections; a connection beyond waits in the listen backlog until one
    /// closes.
    pub max_connections: u32,
    /// Concurrent requests (HTTP/2 streams) per client connection; the client is told in the
    /// connection's settings, and a stream beyond is refused.
    pub max_concurrent_streams: u32,
    /// Bytes of request messages received but not yet answered, across all client connections;
    /// a request whose message does not fit waits, unread, until others are answered
    /// (`crate::api::inflight`).
    pub max_request_bytes_in_flight: u64,
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            max_request_bytes_in_flight: DEFAULT_MAX_REQUEST_BYTES_IN_FLIGHT,
        }
    }
}

/// Default `[limits] max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10_000;
/// Default `[limits] max-concurrent-streams`.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 1_000;
/// Largest `[limits] max-concurrent-streams`: the client listener's connection window covers the
/// 1 MiB window of every stream (so streams waiting for the request bytes budget cannot stall
/// the one holding it, `api::inflight`), and HTTP/2 windows are at most 2 GiB.
pub const MAX_CONCURRENT_STREAMS_CEILING: u32 = 2_047;
/// Default `[limits] max-request-bytes-in-flight`: 256 MiB, four of the largest request
/// messages, or 256 produce requests of a full 1 MiB batch, at once.
pub const DEFAULT_MAX_REQUEST_BYTES_IN_FLIGHT: u64 = 256 << 20;
/// Smallest `[limits] max-request-bytes-in-flight`: the largest request message, so that one
/// message always fits.
pub const MIN_MAX_REQUEST_BYTES_IN_FLIGHT: u64 = rill_proto::MAX_GRPC_MESSAGE_BYTES as u64;

/// How node-to-node traffic is secured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InternalTls {
    /// Mutual TLS with certificates from the cluster's CA that name the node (the default; the
    /// only setting for production).
    Mutual(rill_tls::TlsPaths),
    /// Plain TCP: anyone who reaches the internal listener is trusted as a node. For experiments
    /// and the simulation (which has no TLS); the node logs a warning.
    Insecure,
}

/// Default partition count of each internal topic: enough to spread coordinators over a
/// cluster's nodes; each is one Raft group per replica, idle (quiescent) between requests.
pub const DEFAULT_INTERNAL_TOPIC_PARTITIONS: u32 = 16;
/// Most partitions an internal topic may be created with.
pub const MAX_INTERNAL_TOPIC_PARTITIONS: u32 = 1024;

/// How often preferred-leader balancing looks, and how long a leadership must last before it is
/// handed over (never less than twice the election timeout, see `crate::balance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebalanceTiming {
    /// Interval between checks.
    pub check_every: Duration,
    /// Shortest leadership handed over.
    pub min_leadership: Duration,
}

impl Default for RebalanceTiming {
    fn default() -> Self {
        Self { check_every: Duration::from_secs(5), min_leadership: Duration::from_secs(10) }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Config {
    /// The address clients reach this node at.
    pub fn advertised(&self) -> &str {
        &self.advertise
    }

    /// A configuration for tests and the simulation: node `id` of `members` (internal
    /// addresses), serving clients on `listen`.
    pub fn for_member(
        node_id: NodeId,
        listen: SocketAddr,
        members: BTreeMap<NodeId, String>,
        data_dir: PathBuf,
    ) -> Result<Self> {
        let internal_advertise =
            members.get(&node_id).ok_or_else(|| Error::Config(format!("node {node_id} is not in members")))?.clone();
        let internal_listen = internal_advertise.parse().map_err(|e| Error::Config(format!("member address: {e}")))?;
        Ok(Self {
            node_id,
            listen,
            internal_listen,
            data_dir,
            members,
            join: false,
            advertise: listen.to_string(),
            internal_advertise,
            kafka: None,
            auto_leader_rebalance: true,
            rebalance_timing: RebalanceTiming::default(),
            raft: RaftTiming::default(),
            log_level: "info".into(),
            log_format: LogFormat::Text,
            sync_latency: Duration::ZERO,
            consumer_offsets_partitions: DEFAULT_INTERNAL_TOPIC_PARTITIONS,
            transaction_state_partitions: DEFAULT_INTERNAL_TOPIC_PARTITIONS,
            state_snapshot_every_entries: rill_broker::state_partition::STATE_SNAPSHOT_EVERY_ENTRIES,
            state_log_kept_entries: rill_broker::state_partition::STATE_LOG_KEPT_BEHIND_SNAPSHOT,
            record_purge_every: rill_broker::partition::PURGE_SNAPSHOT_EVERY,
            internal_tls: InternalTls::Insecure,
            client_limits: ClientLimits::default(),
            producer_limits: ProducerLimits::default(),
            storage: StorageTuning::default(),
            groups: rill_coordinator::groups::Timeouts::default(),
            offsets_retention: OffsetsRetention::default(),
            transactional_id_expiration: TransactionalIdExpiration::default(),
        })
    }
}

// ---------------------------------------------------------------- the file ---------------------

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileConfig {
    node_id: Option<NodeId>,
    listen: Option<String>,
    advertise: Option<String>,
    internal_listen: Option<String>,
    internal_advertise: Option<String>,
    kafka_listen: Option<String>,
    kafka_advertise: Option<String>,
    data_dir: Option<PathBuf>,
    #[serde(default)]
    cluster: FileCluster,
    #[serde(default)]
    kafka: FileKafka,
    #[serde(default)]
    tls: FileTls,
    #[serde(default)]
    raft: FileRaft,
    #[serde(default)]
    log: FileLog,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    storage: FileStorage,
    #[serde(default)]
    groups: FileGroups,
    #[serde(default)]
    transactions: FileTransactions,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileKafka {
    #[serde(default, deserialize_with = "byte_size")]
    max_request_bytes: Option<u64>,
    auto_create_topics: Option<bool>,
    default_partitions: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileTransactions {
    #[serde(default, deserialize_with = "duration")]
    transactional_id_expiration: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    transactional_id_expiration_check_interval: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileGroups {
    #[serde(default, deserialize_with = "duration")]
    session_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    heartbeat_interval: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    offsets_retention: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    offsets_retention_check_interval: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileStorage {
    #[serde(default, deserialize_with = "byte_size")]
    segment_bytes: Option<u64>,
    #[serde(default, deserialize_with = "byte_size")]
    gc_bytes_per_second: Option<u64>,
    #[serde(default, deserialize_with = "byte_size")]
    recovery_free_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileLimits {
    max_connections: Option<u32>,
    max_concurrent_streams: Option<u32>,
    #[serde(default, deserialize_with = "byte_size")]
    max_request_bytes_in_flight: Option<u64>,
    max_producers_per_partition: Option<u32>,
    #[serde(default, deserialize_with = "duration")]
    producer_evictable_after: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileCluster {
    members: Option<Vec<String>>,
    join: Option<bool>,
    auto_leader_rebalance: Option<bool>,
    consumer_offsets_partitions: Option<u32>,
    transaction_state_partitions: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileTls {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    insecure_internal: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileRaft {
    #[serde(default, deserialize_with = "duration")]
    heartbeat_interval: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    election_timeout_min: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    election_timeout_max: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    quiesce_after: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FileLog {
    level: Option<String>,
    format: Option<LogFormat>,
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a duration like \"500ms\": {e}")))
}

/// A byte count: an integer, or a string with a binary unit (`"256MiB"`).
fn byte_size<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    struct Visitor;
    impl serde::de::Visitor<'_> for Visitor {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a byte count like 268435456 or \"256MiB\"")
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> std::result::Result<u64, E> {
            Ok(n)
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> std::result::Result<u64, E> {
            u64::try_from(n).map_err(|_| E::custom(format!("{n} is not a byte count")))
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<u64, E> {
            parse_bytes(s).map_err(E::custom)
        }
    }
    d.deserialize_any(Visitor).map(Some)
}

/// Parses a byte count: digits, optionally followed by `B`, `KiB`, `MiB` or `GiB`.
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits);
    let bad = || format!("{s:?} is not a byte count like \"256MiB\" (units: B, KiB, MiB, GiB)");
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return Err(bad()),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).ok_or_else(bad)
}

fn parse_file(text: &str, path: &Path) -> Result<FileConfig> {
    let mut unknown = Vec::new();
    let de = toml::Deserializer::new(text);
    let parsed: FileConfig = serde_ignored::deserialize(de, |p| unknown.push(p.to_string()))
        .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
    if !unknown.is_empty() {
        return Err(Error::Config(format!(
            "{}: unknown key(s) {}; known keys: node-id, listen, advertise, internal-listen, internal-advertise, kafka-listen, kafka-advertise, data-dir, [cluster] members, [cluster] join, [cluster] auto-leader-rebalance, \
             [cluster] consumer-offsets-partitions, [cluster] transaction-state-partitions, [tls] ca, cert, key, insecure-internal, [raft] heartbeat-interval, \
             election-timeout-min, election-timeout-max, quiesce-after, [log] level, format, [limits] max-connections, max-concurrent-streams, max-request-bytes-in-flight, \
             max-producers-per-partition, producer-evictable-after, \
             [storage] segment-bytes, gc-bytes-per-second, recovery-free-bytes, [groups] session-timeout, heartbeat-interval, offsets-retention, offsets-retention-check-interval, \
             [transactions] transactional-id-expiration, transactional-id-expiration-check-interval, [kafka] max-request-bytes",
            path.display(),
            unknown.join(", ")
        )));
    }
    Ok(parsed)
}

// ---------------------------------------------------------------- flags and environment --------

/// `rill-server` flags. Each also reads a `RILL_*` environment variable; flags win over the
/// environment, which wins over the file.
#[derive(Debug, Default, Clone, clap::Parser)]
#[command(name = "rill-server", version, about = "A Rill node")]
pub struct Args {
    /// TOML configuration file.
    #[arg(long, env = "RILL_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's id.
    #[arg(long, env = "RILL_NODE_ID")]
    pub node_id: Option<NodeId>,
    /// Address of the client listener, host:port (public services only).
    #[arg(long, env = "RILL_LISTEN")]
    pub listen: Option<String>,
    /// The address clients reach this node at (default: `--listen`).
    #[arg(long, env = "RILL_ADVERTISE")]
    pub advertise: Option<String>,
    /// Address of the internal listener, host:port (node-to-node services only).
    #[arg(long, env = "RILL_INTERNAL_LISTEN")]
    pub internal_listen: Option<String>,
    /// The address the other nodes reach a joining node at (default: `--internal-listen`); a
    /// founding member is reached at its entry in `--cluster-members`.
    #[arg(long, env = "RILL_INTERNAL_ADVERTISE")]
    pub internal_advertise: Option<String>,
    /// Address of the Kafka wire-protocol listener, host:port (default: none).
    #[arg(long, env = "RILL_KAFKA_LISTEN")]
    pub kafka_listen: Option<String>,
    /// The address Kafka clients reach this node at (default: `--kafka-listen`).
    #[arg(long, env = "RILL_KAFKA_ADVERTISE")]
    pub kafka_advertise: Option<String>,
    /// Largest Kafka request frame (e.g. 64MiB, the default; at least 1MiB, at most
    /// `--max-request-bytes-in-flight`).
    #[arg(long, env = "RILL_KAFKA_MAX_REQUEST_BYTES", value_parser = parse_bytes)]
    pub kafka_max_request_bytes: Option<u64>,
    /// Let a Kafka `Metadata` request create the unknown topics it names, with the cluster's
    /// defaults, when the caller may create them (default: false).
    #[arg(long, env = "RILL_KAFKA_AUTO_CREATE_TOPICS")]
    pub kafka_auto_create_topics: Option<bool>,
    /// Partitions of a topic a Kafka client creates without a count (default: 1).
    #[arg(long, env = "RILL_KAFKA_DEFAULT_PARTITIONS")]
    pub kafka_default_partitions: Option<u32>,
    /// Data directory.
    #[arg(long, env = "RILL_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Cluster members by their internal addresses, comma-separated `id@host:port`.
    #[arg(long, env = "RILL_CLUSTER_MEMBERS", value_delimiter = ',')]
    pub cluster_members: Option<Vec<String>>,
    /// Join the running cluster of `--cluster-members` as a new node (its id is not a member).
    #[arg(long, env = "RILL_JOIN")]
    pub join: bool,
    /// Hand leadership back to preferred replicas once they are in sync (default: true).
    #[arg(long, env = "RILL_AUTO_LEADER_REBALANCE")]
    pub auto_leader_rebalance: Option<bool>,
    /// Partitions of `__consumer_offsets`, when the cluster first creates it (default: 16).
    #[arg(long, env = "RILL_CONSUMER_OFFSETS_PARTITIONS")]
    pub consumer_offsets_partitions: Option<u32>,
    /// Partitions of `__transaction_state`, when the cluster first creates it (default: 16).
    #[arg(long, env = "RILL_TRANSACTION_STATE_PARTITIONS")]
    pub transaction_state_partitions: Option<u32>,
    /// The cluster CA's certificate (PEM): peers' certificates must chain to it.
    #[arg(long, env = "RILL_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// This node's certificate (PEM), naming `node-<id>`.
    #[arg(long, env = "RILL_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, env = "RILL_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// No TLS between nodes: anyone reaching the internal listener is trusted as a node.
    /// Experiments only.
    #[arg(long, env = "RILL_TLS_INSECURE_INTERNAL")]
    pub tls_insecure_internal: bool,
    /// Raft heartbeat interval (e.g. 100ms).
    #[arg(long, env = "RILL_RAFT_HEARTBEAT_INTERVAL", value_parser = humantime::parse_duration)]
    pub raft_heartbeat_interval: Option<Duration>,
    /// Raft election timeout lower bound.
    #[arg(long, env = "RILL_RAFT_ELECTION_TIMEOUT_MIN", value_parser = humantime::parse_duration)]
    pub raft_election_timeout_min: Option<Duration>,
    /// Raft election timeout upper bound.
    #[arg(long, env = "RILL_RAFT_ELECTION_TIMEOUT_MAX", value_parser = humantime::parse_duration)]
    pub raft_election_timeout_max: Option<Duration>,
    /// How long a partition must be idle before its Raft group stops heartbeating (0s: never).
    #[arg(long, env = "RILL_RAFT_QUIESCE_AFTER", value_parser = humantime::parse_duration)]
    pub raft_quiesce_after: Option<Duration>,
    /// Log filter, e.g. `info` or `info,rill_raft=debug`.
    #[arg(long, env = "RILL_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// Log format.
    #[arg(long, env = "RILL_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Most open client connections (default: 10000).
    #[arg(long, env = "RILL_MAX_CONNECTIONS")]
    pub max_connections: Option<u32>,
    /// Most concurrent requests per client connection (default: 1000).
    #[arg(long, env = "RILL_MAX_CONCURRENT_STREAMS")]
    pub max_concurrent_streams: Option<u32>,
    /// Most bytes of client requests received but not yet answered, node-wide (e.g. 256MiB, the
    /// default; at least 64MiB). Requests beyond wait.
    #[arg(long, env = "RILL_MAX_REQUEST_BYTES_IN_FLIGHT", value_parser = parse_bytes)]
    pub max_request_bytes_in_flight: Option<u64>,
    /// Most producers a record partition remembers for deduplication (default: 10000).
    #[arg(long, env = "RILL_MAX_PRODUCERS_PER_PARTITION")]
    pub max_producers_per_partition: Option<u32>,
    /// How long a producer must have been idle before a partition whose producer table is full
    /// may forget it to make room for a new one (default: 2m, the producer's default delivery
    /// timeout).
    #[arg(long, env = "RILL_PRODUCER_EVICTABLE_AFTER", value_parser = humantime::parse_duration)]
    pub producer_evictable_after: Option<Duration>,
    /// Value log segment size (e.g. 128MiB, the default; at least 1MiB).
    #[arg(long, env = "RILL_STORAGE_SEGMENT_BYTES", value_parser = parse_bytes)]
    pub storage_segment_bytes: Option<u64>,
    /// Most bytes per second the value log collector reads and writes (e.g. 128MiB, the
    /// default; at least 1MiB).
    #[arg(long, env = "RILL_STORAGE_GC_BYTES_PER_SECOND", value_parser = parse_bytes)]
    pub storage_gc_bytes_per_second: Option<u64>,
    /// After a storage failure, restart from the durable state once the data directory takes a
    /// file of this many bytes (e.g. 64MiB, the default; at least 1MiB).
    #[arg(long, env = "RILL_STORAGE_RECOVERY_FREE_BYTES", value_parser = parse_bytes)]
    pub storage_recovery_free_bytes: Option<u64>,
    /// How long a consumer group member may go without a heartbeat before it is removed and its
    /// partitions reassigned (Kafka's `group.consumer.session.timeout.ms`; default 45s).
    #[arg(long, env = "RILL_GROUP_SESSION_TIMEOUT", value_parser = humantime::parse_duration)]
    pub group_session_timeout: Option<Duration>,
    /// How often consumer group members heartbeat (Kafka's `group.consumer.heartbeat.interval.ms`;
    /// default 5s; less than the session timeout).
    #[arg(long, env = "RILL_GROUP_HEARTBEAT_INTERVAL", value_parser = humantime::parse_duration)]
    pub group_heartbeat_interval: Option<Duration>,
    /// How long a consumer group without members keeps each committed offset, counted from the
    /// later of its commit and the moment the group became empty (Kafka's `offsets.retention.ms`;
    /// default 7d).
    #[arg(long, env = "RILL_OFFSETS_RETENTION", value_parser = humantime::parse_duration)]
    pub offsets_retention: Option<Duration>,
    /// How often the coordinators look for expired offsets (Kafka's
    /// `offsets.retention.check.interval.ms`; default 10m).
    #[arg(long, env = "RILL_OFFSETS_RETENTION_CHECK_INTERVAL", value_parser = humantime::parse_duration)]
    pub offsets_retention_check_interval: Option<Duration>,
    /// How long a transactional id with no transaction open is kept after its last use, before
    /// it and its producer id are removed (Kafka's `transactional.id.expiration.ms`; default 7d).
    #[arg(long, env = "RILL_TRANSACTIONAL_ID_EXPIRATION", value_parser = humantime::parse_duration)]
    pub transactional_id_expiration: Option<Duration>,
    /// How often the transaction coordinators look for expired transactional ids (Kafka's
    /// `transactions.remove.expired.transaction.cleanup.interval.ms`; default 1h).
    #[arg(long, env = "RILL_TRANSACTIONAL_ID_EXPIRATION_CHECK_INTERVAL", value_parser = humantime::parse_duration)]
    pub transactional_id_expiration_check_interval: Option<Duration>,
}

impl Args {
    /// Reads the file (if any), applies overrides, and validates.
    pub fn load(&self) -> Result<Config> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
                parse_file(&text, path)?
            }
            None => FileConfig::default(),
        };
        let missing = |what: &str, flag: &str, env: &str| {
            Error::Config(format!("{what} is not set (config key, --{flag} or {env})"))
        };
        let node_id = self.node_id.or(file.node_id).ok_or_else(|| missing("node-id", "node-id", "RILL_NODE_ID"))?;
        let listen = self.listen.clone().or(file.listen).ok_or_else(|| missing("listen", "listen", "RILL_LISTEN"))?;
        let internal_listen = self
            .internal_listen
            .clone()
            .or(file.internal_listen)
            .ok_or_else(|| missing("internal-listen", "internal-listen", "RILL_INTERNAL_LISTEN"))?;
        let data_dir =
            self.data_dir.clone().or(file.data_dir).ok_or_else(|| missing("data-dir", "data-dir", "RILL_DATA_DIR"))?;
        let members = self
            .cluster_members
            .clone()
            .or(file.cluster.members)
            .ok_or_else(|| missing("[cluster] members", "cluster-members", "RILL_CLUSTER_MEMBERS"))?;
        let defaults = RaftTiming::default();
        let ms = |d: Option<Duration>, default: u64| d.map(|d| d.as_millis() as u64).unwrap_or(default);
        let raft = RaftTiming {
            heartbeat_ms: ms(self.raft_heartbeat_interval.or(file.raft.heartbeat_interval), defaults.heartbeat_ms),
            election_min_ms: ms(
                self.raft_election_timeout_min.or(file.raft.election_timeout_min),
                defaults.election_min_ms,
            ),
            election_max_ms: ms(
                self.raft_election_timeout_max.or(file.raft.election_timeout_max),
                defaults.election_max_ms,
            ),
            quiesce_after_ms: ms(self.raft_quiesce_after.or(file.raft.quiesce_after), defaults.quiesce_after_ms),
        };
        let cluster = ClusterArgs {
            members,
            join: self.join || file.cluster.join.unwrap_or(false),
            internal_advertise: self.internal_advertise.clone().or(file.internal_advertise),
            auto_leader_rebalance: self.auto_leader_rebalance.or(file.cluster.auto_leader_rebalance).unwrap_or(true),
            consumer_offsets_partitions: self
                .consumer_offsets_partitions
                .or(file.cluster.consumer_offsets_partitions)
                .unwrap_or(DEFAULT_INTERNAL_TOPIC_PARTITIONS),
            transaction_state_partitions: self
                .transaction_state_partitions
                .or(file.cluster.transaction_state_partitions)
                .unwrap_or(DEFAULT_INTERNAL_TOPIC_PARTITIONS),
        };
        let internal_tls = internal_tls(
            self.tls_insecure_internal || file.tls.insecure_internal.unwrap_or(false),
            self.tls_ca.clone().or(file.tls.ca),
            self.tls_cert.clone().or(file.tls.cert),
            self.tls_key.clone().or(file.tls.key),
        )?;
        let listeners = Listeners { listen, advertise: self.advertise.clone().or(file.advertise), internal_listen };
        let mut config = build(
            node_id,
            listeners,
            data_dir,
            cluster,
            raft,
            self.log_level.clone().or(file.log.level).unwrap_or_else(|| "info".into()),
            self.log_format.or(file.log.format).unwrap_or(LogFormat::Text),
        )?;
        config.internal_tls = internal_tls;
        let limits = FileLimits {
            max_connections: self.max_connections.or(file.limits.max_connections),
            max_concurrent_streams: self.max_concurrent_streams.or(file.limits.max_concurrent_streams),
            max_request_bytes_in_flight: self.max_request_bytes_in_flight.or(file.limits.max_request_bytes_in_flight),
            max_producers_per_partition: self.max_producers_per_partition.or(file.limits.max_producers_per_partition),
            producer_evictable_after: self.producer_evictable_after.or(file.limits.producer_evictable_after),
        };
        config.client_limits = client_limits(&limits)?;
        config.kafka = kafka_listener(
            &config,
            self.kafka_listen.clone().or(file.kafka_listen),
            self.kafka_advertise.clone().or(file.kafka_advertise),
            self.kafka_max_request_bytes.or(file.kafka.max_request_bytes),
            self.kafka_auto_create_topics.or(file.kafka.auto_create_topics),
            self.kafka_default_partitions.or(file.kafka.default_partitions),
        )?;
        config.producer_limits = producer_limits(&limits)?;
        config.storage = storage_tuning(FileStorage {
            segment_bytes: self.storage_segment_bytes.or(file.storage.segment_bytes),
            gc_bytes_per_second: self.storage_gc_bytes_per_second.or(file.storage.gc_bytes_per_second),
            recovery_free_bytes: self.storage_recovery_free_bytes.or(file.storage.recovery_free_bytes),
        })?;
        config.groups = group_timeouts(
            self.group_session_timeout.or(file.groups.session_timeout),
            self.group_heartbeat_interval.or(file.groups.heartbeat_interval),
        )?;
        config.offsets_retention = offsets_retention(
            self.offsets_retention.or(file.groups.offsets_retention),
            self.offsets_retention_check_interval.or(file.groups.offsets_retention_check_interval),
        )?;
        config.transactional_id_expiration = transactional_id_expiration(
            self.transactional_id_expiration.or(file.transactions.transactional_id_expiration),
            self.transactional_id_expiration_check_interval
                .or(file.transactions.transactional_id_expiration_check_interval),
        )?;
        Ok(config)
    }
}

/// The `[groups]` settings: a session of 1 s to 1 h, and a heartbeat interval shorter than it
/// (so a healthy member always heartbeats within its session).
fn group_timeouts(session: Option<Duration>, interval: Option<Duration>) -> Result<rill_coordinator::groups::Timeouts> {
    let defaults = rill_coordinator::groups::Timeouts::default();
    let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
    let t = rill_coordinator::groups::Timeouts {
        session_ms: session.map_or(defaults.session_ms, ms),
        heartbeat_interval_ms: interval.map_or(defaults.heartbeat_interval_ms, ms),
    };
    if !(1_000..=3_600_000).contains(&t.session_ms) {
        return Err(Error::Config(format!("[groups] session-timeout must be 1s to 1h, got {} ms", t.session_ms)));
    }
    if t.heartbeat_interval_ms == 0 || t.heartbeat_interval_ms >= t.session_ms {
        return Err(Error::Config(format!(
            "[groups] heartbeat-interval must be more than 0 and less than the session timeout ({} ms), got {} ms",
            t.session_ms, t.heartbeat_interval_ms
        )));
    }
    Ok(t)
}

/// The offsets retention settings: both at least one second.
fn offsets_retention(retention: Option<Duration>, check_every: Option<Duration>) -> Result<OffsetsRetention> {
    let defaults = OffsetsRetention::default();
    let r = OffsetsRetention {
        retention: retention.unwrap_or(defaults.retention),
        check_every: check_every.unwrap_or(defaults.check_every),
    };
    at_least_a_second(
        "groups",
        [("offsets-retention", r.retention), ("offsets-retention-check-interval", r.check_every)],
    )?;
    Ok(r)
}

/// The transactional id expiration settings: both at least one second.
fn transactional_id_expiration(
    expiration: Option<Duration>,
    check_every: Option<Duration>,
) -> Result<TransactionalIdExpiration> {
    let defaults = TransactionalIdExpiration::default();
    let e = TransactionalIdExpiration {
        expiration: expiration.unwrap_or(defaults.expiration),
        check_every: check_every.unwrap_or(defaults.check_every),
    };
    at_least_a_second(
        "transactions",
        [("transactional-id-expiration", e.expiration), ("transactional-id-expiration-check-interval", e.check_every)],
    )?;
    Ok(e)
}

/// Refuses a duration of `[section]` shorter than one second.
fn at_least_a_second<const N: usize>(section: &str, durations: [(&str, Duration); N]) -> Result<()> {
    for (name, d) in durations {
        if d < Duration::from_secs(1) {
            return Err(Error::Config(format!("[{section}] {name} must be at least 1s, got {} ms", d.as_millis())));
        }
    }
    Ok(())
}

/// The `[limits]` settings as given: the counts at least 1, the byte budget at least one
/// largest message.
fn client_limits(given: &FileLimits) -> Result<ClientLimits> {
    let defaults = ClientLimits::default();
    let limits = ClientLimits {
        max_connections: given.max_connections.unwrap_or(defaults.max_connections),
        max_concurrent_streams: given.max_concurrent_streams.unwrap_or(defaults.max_concurrent_streams),
        max_request_bytes_in_flight: given.max_request_bytes_in_flight.unwrap_or(defaults.max_request_bytes_in_flight),
    };
    for (key, n) in
        [("max-connections", limits.max_connections), ("max-concurrent-streams", limits.max_concurrent_streams)]
    {
        if n == 0 {
            return Err(Error::Config(format!("[limits] {key} must be at least 1")));
        }
    }
    if limits.max_concurrent_streams > MAX_CONCURRENT_STREAMS_CEILING {
        return Err(Error::Config(format!(
            "[limits] max-concurrent-streams must be at most {MAX_CONCURRENT_STREAMS_CEILING} (the streams' flow-control \
             windows must fit in their connection's), got {}",
            limits.max_concurrent_streams
        )));
    }
    if limits.max_request_bytes_in_flight < MIN_MAX_REQUEST_BYTES_IN_FLIGHT {
        return Err(Error::Config(format!(
            "[limits] max-request-bytes-in-flight must be at least {} MiB, the largest request message, so that one \
             message always fits; got {} bytes",
            MIN_MAX_REQUEST_BYTES_IN_FLIGHT >> 20,
            limits.max_request_bytes_in_flight
        )));
    }
    Ok(limits)
}

/// The `[limits]` producer table settings as given: at least one producer per partition, at
/// most [`MAX_PRODUCERS_PER_PARTITION_CEILING`]; an idle time of at least a second.
fn producer_limits(given: &FileLimits) -> Result<ProducerLimits> {
    let defaults = ProducerLimits::default();
    let max = given.max_producers_per_partition.map_or(defaults.max_per_partition, |n| n as usize);
    if max == 0 || max > MAX_PRODUCERS_PER_PARTITION_CEILING {
        return Err(Error::Config(format!(
            "[limits] max-producers-per-partition must be between 1 and {MAX_PRODUCERS_PER_PARTITION_CEILING}, got {max}"
        )));
    }
    let evictable_after = given.producer_evictable_after.unwrap_or(defaults.evictable_after);
    if evictable_after < Duration::from_secs(1) {
        return Err(Error::Config(format!(
            "[limits] producer-evictable-after must be at least 1s, got {}",
            humantime::format_duration(evictable_after)
        )));
    }
    Ok(ProducerLimits { max_per_partition: max, evictable_after })
}

/// Largest `[limits] max-producers-per-partition`: a remembered producer costs a few hundred
/// bytes on every replica of every partition it wrote to.
pub const MAX_PRODUCERS_PER_PARTITION_CEILING: usize = 1_000_000;

/// The `[storage]` settings as given, each at least its minimum.
fn storage_tuning(given: FileStorage) -> Result<StorageTuning> {
    for (key, value, min) in [
        ("segment-bytes", given.segment_bytes, MIN_SEGMENT_BYTES),
        ("gc-bytes-per-second", given.gc_bytes_per_second, MIN_GC_BYTES_PER_SECOND),
        ("recovery-free-bytes", given.recovery_free_bytes, MIN_RECOVERY_FREE_BYTES),
    ] {
        if let Some(value) = value.filter(|v| *v < min) {
            return Err(Error::Config(format!(
                "[storage] {key} must be at least {} MiB, got {value} bytes",
                min >> 20
            )));
        }
    }
    Ok(StorageTuning {
        segment_bytes: given.segment_bytes,
        gc_bytes_per_second: given.gc_bytes_per_second,
        recovery_free_bytes: given.recovery_free_bytes,
    })
}

/// The `[tls]` settings: all three files, or the insecure setting, never both or neither.
fn internal_tls(
    insecure: bool,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<InternalTls> {
    match (insecure, ca, cert, key) {
        (true, None, None, None) => Ok(InternalTls::Insecure),
        (true, ..) => {
            Err(Error::Config("[tls] insecure-internal is set together with certificate files; choose one".into()))
        }
        (false, Some(ca), Some(cert), Some(key)) => Ok(InternalTls::Mutual(rill_tls::TlsPaths { ca, cert, key })),
        (false, ..) => Err(Error::Config(
            "the internal listener needs mutual TLS: set [tls] ca, cert and key (--tls-ca, --tls-cert, --tls-key; \
             rill dev and the test kit generate them, docs/security.md says how to issue them), or \
             [tls] insecure-internal = true for experiments"
                .into(),
        )),
    }
}

/// Parses `id@host:port`.
pub fn parse_member(s: &str) -> Result<(NodeId, String)> {
    let bad = || Error::Config(format!("cluster member {s:?} must look like 1@127.0.0.1:7001"));
    let (id, addr) = s.trim().split_once('@').ok_or_else(bad)?;
    let id: NodeId = id.parse().map_err(|_| bad())?;
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if id == 0 || host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok((id, addr.to_string()))
}

/// The `[cluster]` settings as given.
struct ClusterArgs {
    members: Vec<String>,
    /// Join a running cluster (this node is not one of `members`).
    join: bool,
    /// A joining node's address for the others.
    internal_advertise: Option<String>,
    auto_leader_rebalance: bool,
    consumer_offsets_partitions: u32,
    transaction_state_partitions: u32,
}

/// The listener settings as given.
struct Listeners {
    listen: String,
    advertise: Option<String>,
    internal_listen: String,
}

/// Parses `host:port` for `what`.
fn socket_addr(what: &str, value: &str) -> Result<SocketAddr> {
    value.parse().map_err(|e| Error::Config(format!("{what} {value:?} is not host:port: {e}")))
}

/// An address others must reach: `host:port`, and not 0.0.0.0 / [::].
fn reachable(what: &str, value: &str, setting: &str) -> Result<()> {
    let addr = socket_addr(what, value)?;
    if addr.ip().is_unspecified() {
        return Err(Error::Config(format!(
            "{what} must be an address the others can reach, not {addr}; set {setting}"
        )));
    }
    Ok(())
}

/// The Kafka listener's settings: none without `kafka-listen`; its address apart from the other
/// listeners, an advertised address clients can reach, and a frame limit that fits the node's
/// request bytes budget (so one frame can always be read).
fn kafka_listener(
    config: &Config,
    listen: Option<String>,
    advertise: Option<String>,
    max_request_bytes: Option<u64>,
    auto_create_topics: Option<bool>,
    default_partitions: Option<u32>,
) -> Result<Option<KafkaListener>> {
    let Some(listen) = listen else {
        if advertise.is_some()
            || max_request_bytes.is_some()
            || auto_create_topics.is_some()
            || default_partitions.is_some()
        {
            return Err(Error::Config(
                "kafka-advertise and the [kafka] settings need kafka-listen (the Kafka listener is off without it)"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let listen = socket_addr("kafka-listen", &listen)?;
    if listen == config.listen || listen == config.internal_listen {
        return Err(Error::Config(format!(
            "kafka-listen {listen} is also the address of another listener (listen {}, internal-listen {})",
            config.listen, config.internal_listen
        )));
    }
    let advertise = advertise.unwrap_or_else(|| listen.to_string());
    reachable("the Kafka client address (kafka-advertise)", &advertise, "--kafka-advertise")?;
    let max = max_request_bytes.unwrap_or(u64::from(DEFAULT_KAFKA_MAX_REQUEST_BYTES));
    let ceiling = config.client_limits.max_request_bytes_in_flight.min(u64::from(i32::MAX as u32));
    if max < u64::from(MIN_KAFKA_MAX_REQUEST_BYTES) || max > ceiling {
        return Err(Error::Config(format!(
            "[kafka] max-request-bytes must be at least {} MiB and at most [limits] max-request-bytes-in-flight ({ceiling} bytes), got {max} bytes",
            MIN_KAFKA_MAX_REQUEST_BYTES >> 20
        )));
    }
    // Within i32::MAX, so it fits the frame's length field.
    let max_request_bytes = u32::try_from(max).unwrap_or(i32::MAX as u32);
    let auto_create_topics = auto_create_topics.unwrap_or(false);
    let default_partitions = default_partitions.unwrap_or(DEFAULT_KAFKA_PARTITIONS);
    if !(1..=MAX_KAFKA_DEFAULT_PARTITIONS).contains(&default_partitions) {
        return Err(Error::Config(format!(
            "[kafka] default-partitions must be between 1 and {MAX_KAFKA_DEFAULT_PARTITIONS}, got {default_partitions}"
        )));
    }
    Ok(Some(KafkaListener { listen, advertise, max_request_bytes, auto_create_topics, default_partitions }))
}

fn build(
    node_id: NodeId,
    listeners: Listeners,
    data_dir: PathBuf,
    cluster: ClusterArgs,
    raft: RaftTiming,
    log_level: String,
    log_format: LogFormat,
) -> Result<Config> {
    if node_id == 0 {
        return Err(Error::Config("node-id must be at least 1".into()));
    }
    let listen = socket_addr("listen", &listeners.listen)?;
    let internal_listen = socket_addr("internal-listen", &listeners.internal_listen)?;
    if listen == internal_listen {
        return Err(Error::Config(format!(
            "listen and internal-listen are both {listen}: clients and nodes need separate listeners"
        )));
    }
    let advertise = listeners.advertise.unwrap_or_else(|| listen.to_string());
    reachable("the client address (advertise)", &advertise, "--advertise")?;
    let mut parsed = BTreeMap::new();
    let ClusterArgs {
        members,
        join,
        internal_advertise,
        auto_leader_rebalance,
        consumer_offsets_partitions,
        transaction_state_partitions,
    } = cluster;
    for (key, n) in [
        ("consumer-offsets-partitions", consumer_offsets_partitions),
        ("transaction-state-partitions", transaction_state_partitions),
    ] {
        if n == 0 || n > MAX_INTERNAL_TOPIC_PARTITIONS {
            return Err(Error::Config(format!(
                "[cluster] {key} must be between 1 and {MAX_INTERNAL_TOPIC_PARTITIONS}, got {n}"
            )));
        }
    }
    for m in &members {
        let (id, addr) = parse_member(m)?;
        if parsed.insert(id, addr).is_some() {
            return Err(Error::Config(format!("cluster member id {id} is listed twice")));
        }
    }
    let internal_advertise = match (parsed.get(&node_id), join) {
        (Some(addr), false) => {
            if internal_advertise.as_ref().is_some_and(|a| a != addr) {
                return Err(Error::Config(format!(
                    "internal-advertise is for joining nodes; node {node_id} is a member and is reached at {addr}"
                )));
            }
            addr.clone()
        }
        (None, false) => {
            return Err(Error::Config(format!(
                "node-id {node_id} is not one of the cluster members {:?}; to add it to a running cluster, start it with --join",
                parsed.keys().collect::<Vec<_>>()
            )))
        }
        (Some(_), true) => {
            return Err(Error::Config(format!(
                "node-id {node_id} is a founding member; --join is for new nodes (ids not in members)"
            )))
        }
        (None, true) => {
            let internal_advertise = internal_advertise.unwrap_or_else(|| internal_listen.to_string());
            reachable("a joining node's internal address", &internal_advertise, "--internal-advertise")?;
            internal_advertise
        }
    };
    if raft.heartbeat_ms == 0
        || raft.election_min_ms <= raft.heartbeat_ms
        || raft.election_max_ms <= raft.election_min_ms
    {
        return Err(Error::Config(format!(
            "raft timing must satisfy 0 < heartbeat-interval ({} ms) < election-timeout-min ({} ms) < election-timeout-max ({} ms)",
            raft.heartbeat_ms, raft.election_min_ms, raft.election_max_ms
        )));
    }
    Ok(Config {
        node_id,
        listen,
        internal_listen,
        data_dir,
        members: parsed,
        join,
        advertise,
        internal_advertise,
        kafka: None,
        auto_leader_rebalance,
        rebalance_timing: RebalanceTiming::default(),
        raft,
        log_level,
        log_format,
        sync_latency: Duration::ZERO,
        consumer_offsets_partitions,
        transaction_state_partitions,
        state_snapshot_every_entries: rill_broker::state_partition::STATE_SNAPSHOT_EVERY_ENTRIES,
        state_log_kept_entries: rill_broker::state_partition::STATE_LOG_KEPT_BEHIND_SNAPSHOT,
        record_purge_every: rill_broker::partition::PURGE_SNAPSHOT_EVERY,
        internal_tls: InternalTls::Insecure,
        client_limits: ClientLimits::default(),
        producer_limits: ProducerLimits::default(),
        storage: StorageTuning::default(),
        groups: rill_coordinator::groups::Timeouts::default(),
        offsets_retention: OffsetsRetention::default(),
        transactional_id_expiration: TransactionalIdExpiration::default(),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("rill.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Loads a valid file with `text` added under `[section]`, then `flags` on the command line.
    fn load_with(dir: &Path, section: &str, text: &str, flags: &[&str]) -> Result<Config> {
        let path = write(dir, &format!("{GOOD}[{section}]\n{text}\n"));
        let mut args = vec!["rill-server", "--config", path.to_str().unwrap()];
        args.extend_from_slice(flags);
        Args::parse_from(args).load()
    }

    const GOOD: &str = r#"
node-id = 2
listen = "127.0.0.1:7002"
internal-listen = "127.0.0.1:7102"
data-dir = "/tmp/rill-2"
[cluster]
members = ["1@127.0.0.1:7101", "2@127.0.0.1:7102", "3@127.0.0.1:7103"]
[tls]
ca = "/etc/rill/ca.pem"
cert = "/etc/rill/node-2.pem"
key = "/etc/rill/node-2.key"
[raft]
heartbeat-interval = "50ms"
"#;

    #[test]
    fn file_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), GOOD);
        let args = Args::parse_from(["rill-server", "--config", path.to_str().unwrap(), "--data-dir", "/elsewhere"]);
        let c = args.load().unwrap();
        assert_eq!(c.node_id, 2);
        assert_eq!(c.data_dir, PathBuf::from("/elsewhere"));
        assert_eq!(c.raft.heartbeat_ms, 50);
        assert_eq!(c.advertised(), "127.0.0.1:7002");
        assert_eq!(c.internal_advertise, "127.0.0.1:7102");
        assert_eq!(c.members.len(), 3);
        assert!(matches!(&c.internal_tls, InternalTls::Mutual(p) if p.cert == Path::new("/etc/rill/node-2.pem")));
    }

    #[test]
    fn the_kafka_listener_is_off_unless_it_has_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), GOOD);
        let load = |flags: &[&str]| {
            let mut args = vec!["rill-server", "--config", path.to_str().unwrap()];
            args.extend_from_slice(flags);
            Args::parse_from(args).load()
        };
        assert_eq!(load(&[]).unwrap().kafka, None);
        let on = load(&["--kafka-listen", "127.0.0.1:9092"]).unwrap().kafka.unwrap();
        assert_eq!(on.advertise, "127.0.0.1:9092");
        assert_eq!(on.max_request_bytes, DEFAULT_KAFKA_MAX_REQUEST_BYTES);
        let advertised = load(&["--kafka-listen", "0.0.0.0:9092", "--kafka-advertise", "10.0.0.2:9092"]).unwrap();
        assert_eq!(advertised.kafka.unwrap().advertise, "10.0.0.2:9092");
        for (flags, says) in [
            (&["--kafka-advertise", "10.0.0.2:9092"][..], "need kafka-listen"),
            (&["--kafka-listen", "0.0.0.0:9092"][..], "not 0.0.0.0:9092"),
            (&["--kafka-listen", "127.0.0.1:7102"][..], "another listener"),
            (&["--kafka-listen", "127.0.0.1:9092", "--kafka-max-request-bytes", "1KiB"][..], "at least 1 MiB"),
            (&["--kafka-listen", "127.0.0.1:9092", "--kafka-max-request-bytes", "1GiB"][..], "at most"),
        ] {
            let e = load(flags).unwrap_err().to_string();
            assert!(e.contains(says), "{flags:?}: {e}");
        }
        let c = load_with(dir.path(), "kafka", "max-request-bytes = \"2MiB\"", &["--kafka-listen", "127.0.0.1:9092"]);
        assert_eq!(c.unwrap().kafka.unwrap().max_request_bytes, 2 << 20);
    }

    #[test]
    fn client_limits_come_from_the_file_or_flags_and_are_at_least_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &format!("{GOOD}[limits]\nmax-connections = 50\n"));
        let args =
            Args::parse_from(["rill-server", "--config", path.to_str().unwrap(), "--max-concurrent-streams", "7"]);
        let c = args.load().unwrap();
        assert_eq!(
            c.client_limits,
            ClientLimits {
                max_connections: 50,
                max_concurrent_streams: 7,
                max_request_bytes_in_flight: DEFAULT_MAX_REQUEST_BYTES_IN_FLIGHT
            }
        );
        let defaults = Args::parse_from(["rill-server", "--config", write(dir.path(), GOOD).to_str().unwrap()]);
        assert_eq!(defaults.load().unwrap().client_limits, ClientLimits::default());
        let zero = Args::parse_from(["rill-server", "--config", path.to_str().unwrap(), "--max-connections", "0"]);
        assert!(zero.load().unwrap_err().to_string().contains("max-connections must be at least 1"));
        let many =
            Args::parse_from(["rill-server", "--config", path.to_str().unwrap(), "--max-concurrent-streams", "2048"]);
        assert!(many.load().unwrap_err().to_string().contains("max-concurrent-streams must be at most 2047"));
    }

    #[test]
    fn the_request_bytes_budget_takes_units_and_holds_one_largest_message() {
        let dir = tempfile::tempdir().unwrap();
        let budget = |text: &str, flag: Option<&str>| {
            let flags: Vec<&str> = flag.map(|f| ["--max-request-bytes-in-flight", f]).into_iter().flatten().collect();
            load_with(dir.path(), "limits", text, &flags).map(|c| c.client_limits.max_request_bytes_in_flight)
        };
        assert_eq!(budget("max-request-bytes-in-flight = \"512MiB\"", None).unwrap(), 512 << 20);
        assert_eq!(budget("max-request-bytes-in-flight = 134217728", None).unwrap(), 128 << 20);
        assert_eq!(budget("max-request-bytes-in-flight = \"512MiB\"", Some("1GiB")).unwrap(), 1 << 30);
        assert_eq!(budget("", None).unwrap(), DEFAULT_MAX_REQUEST_BYTES_IN_FLIGHT);
        let small = budget("max-request-bytes-in-flight = \"1MiB\"", None).unwrap_err().to_string();
        assert!(small.contains("must be at least 64 MiB, the largest request message"), "{small}");
        assert!(budget("", Some("0")).unwrap_err().to_string().contains("must be at least 64 MiB"));
        let unit = budget("max-request-bytes-in-flight = \"256MB\"", None).unwrap_err().to_string();
        assert!(unit.contains("units: B, KiB, MiB, GiB"), "{unit}");
        assert!(budget("max-request-bytes-in-flight = -1", None).is_err());
        assert_eq!(parse_bytes("64 KiB"), Ok(64 << 10));
        assert!(parse_bytes("99999999999999GiB").is_err());
    }

    #[test]
    fn producer_limits_have_bounds_and_flags_win_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let limits =
            |text: &str, flags: &[&str]| load_with(dir.path(), "limits", text, flags).map(|c| c.producer_limits);
        assert_eq!(limits("", &[]).unwrap(), ProducerLimits::default());
        let set = limits("max-producers-per-partition = 50\nproducer-evictable-after = \"30s\"", &[]).unwrap();
        assert_eq!(set, ProducerLimits { max_per_partition: 50, evictable_after: Duration::from_secs(30) });
        let flagged = limits("max-producers-per-partition = 50", &["--max-producers-per-partition", "7"]).unwrap();
        assert_eq!(flagged.max_per_partition, 7);
        let zero = limits("max-producers-per-partition = 0", &[]).unwrap_err().to_string();
        assert!(zero.contains("max-producers-per-partition must be between 1 and 1000000"), "{zero}");
        assert!(limits("max-producers-per-partition = 1000001", &[]).is_err());
        let short = limits("producer-evictable-after = \"10ms\"", &[]).unwrap_err().to_string();
        assert!(short.contains("producer-evictable-after must be at least 1s"), "{short}");
    }

    #[test]
    fn storage_tuning_takes_units_and_minimums_and_defaults_to_the_engines() {
        let dir = tempfile::tempdir().unwrap();
        let storage = |text: &str, flags: &[&str]| load_with(dir.path(), "storage", text, flags).map(|c| c.storage);
        assert_eq!(storage("", &[]).unwrap(), StorageTuning::default());
        let set = storage("segment-bytes = \"4MiB\"\ngc-bytes-per-second = \"32MiB\"", &[]).unwrap();
        assert_eq!(
            set,
            StorageTuning {
                segment_bytes: Some(4 << 20),
                gc_bytes_per_second: Some(32 << 20),
                recovery_free_bytes: None
            }
        );
        let recovery = storage("recovery-free-bytes = \"8MiB\"", &[]).unwrap();
        assert_eq!(recovery.recovery_free_bytes, Some(8 << 20));
        let tiny = storage("", &["--storage-recovery-free-bytes", "4KiB"]).unwrap_err().to_string();
        assert!(tiny.contains("[storage] recovery-free-bytes must be at least 1 MiB"), "{tiny}");
        let flag = storage("segment-bytes = \"4MiB\"", &["--storage-segment-bytes", "8MiB"]).unwrap();
        assert_eq!(flag.segment_bytes, Some(8 << 20));
        let small = storage("segment-bytes = \"512KiB\"", &[]).unwrap_err().to_string();
        assert!(small.contains("[storage] segment-bytes must be at least 1 MiB"), "{small}");
        let slow = storage("", &["--storage-gc-bytes-per-second", "1000"]).unwrap_err().to_string();
        assert!(slow.contains("[storage] gc-bytes-per-second must be at least 1 MiB"), "{slow}");
        let unknown = storage("segment-size = \"4MiB\"", &[]).unwrap_err().to_string();
        assert!(unknown.contains("storage.segment-size") && unknown.contains("[storage] segment-bytes"), "{unknown}");
    }

    #[test]
    fn transactional_id_expiration_comes_from_the_file_or_flags_and_is_at_least_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let expiration = |text: &str, flags: &[&str]| {
            load_with(dir.path(), "transactions", text, flags).map(|c| c.transactional_id_expiration)
        };
        assert_eq!(expiration("", &[]).unwrap(), TransactionalIdExpiration::default());
        let set =
            expiration("transactional-id-expiration = \"2d\"", &["--transactional-id-expiration-check-interval", "5m"]);
        assert_eq!(
            set.unwrap(),
            TransactionalIdExpiration {
                expiration: Duration::from_secs(2 * 86_400),
                check_every: Duration::from_secs(300)
            }
        );
        let flag =
            expiration("transactional-id-expiration = \"2d\"", &["--transactional-id-expiration", "1h"]).unwrap();
        assert_eq!(flag.expiration, Duration::from_secs(3600));
        let short = expiration("transactional-id-expiration-check-interval = \"10ms\"", &[]).unwrap_err().to_string();
        assert!(
            short.contains("[transactions] transactional-id-expiration-check-interval must be at least 1s"),
            "{short}"
        );
    }

    #[test]
    fn tls_is_required_unless_explicitly_insecure() {
        let base = Args {
            node_id: Some(1),
            listen: Some("127.0.0.1:7001".into()),
            internal_listen: Some("127.0.0.1:7101".into()),
            data_dir: Some("/d".into()),
            cluster_members: Some(vec!["1@127.0.0.1:7101".into()]),
            ..Default::default()
        };
        assert!(base.load().unwrap_err().to_string().contains("needs mutual TLS"));
        let mut a = base.clone();
        a.tls_insecure_internal = true;
        assert_eq!(a.load().unwrap().internal_tls, InternalTls::Insecure);
        a.tls_ca = Some("/ca.pem".into());
        assert!(a.load().unwrap_err().to_string().contains("choose one"));
        let mut a = base;
        a.tls_ca = Some("/ca.pem".into());
        a.tls_cert = Some("/n.pem".into());
        assert!(a.load().unwrap_err().to_string().contains("needs mutual TLS"), "a missing key");
        a.tls_key = Some("/n.key".into());
        assert!(matches!(a.load().unwrap().internal_tls, InternalTls::Mutual(_)));
    }

    #[test]
    fn the_deploy_template_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/rill.toml");
        let c = Args { config: Some(path), ..Default::default() }.load().unwrap();
        assert_eq!((c.node_id, c.members.len(), c.raft), (1, 3, RaftTiming::default()));
    }

    #[test]
    fn unknown_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &format!("{GOOD}\nlisten-addr = \"x\"\n[raft.extra]\nfoo = 1\n"));
        let err = Args { config: Some(path), ..Default::default() }.load().unwrap_err().to_string();
        assert!(err.contains("listen-addr") && err.contains("raft.extra"), "{err}");
    }

    #[test]
    fn a_new_node_joins_with_its_listen_or_advertised_address() {
        let base = Args {
            node_id: Some(4),
            listen: Some("127.0.0.1:7004".into()),
            internal_listen: Some("127.0.0.1:7104".into()),
            data_dir: Some("/d".into()),
            cluster_members: Some(vec!["1@127.0.0.1:7101".into()]),
            join: true,
            tls_insecure_internal: true,
            ..Default::default()
        };
        let c = base.load().unwrap();
        assert!(c.join);
        assert_eq!((c.advertised(), c.internal_advertise.as_str()), ("127.0.0.1:7004", "127.0.0.1:7104"));
        let mut a = base.clone();
        a.listen = Some("0.0.0.0:7004".into());
        assert!(a.load().unwrap_err().to_string().contains("set --advertise"));
        a.advertise = Some("10.0.0.4:7004".into());
        assert_eq!(a.load().unwrap().advertised(), "10.0.0.4:7004");
        a.internal_listen = Some("0.0.0.0:7104".into());
        assert!(a.load().unwrap_err().to_string().contains("set --internal-advertise"));
        a.internal_advertise = Some("10.0.0.4:7104".into());
        assert_eq!(a.load().unwrap().internal_advertise, "10.0.0.4:7104");
        let mut a = base.clone();
        a.internal_listen = a.listen.clone();
        assert!(a.load().unwrap_err().to_string().contains("separate listeners"));
        let mut a = base.clone();
        a.node_id = Some(1);
        assert!(a.load().unwrap_err().to_string().contains("founding member"));
        let mut a = base;
        a.join = false;
        assert!(a.load().unwrap_err().to_string().contains("start it with --join"));
    }

    #[test]
    fn bad_values_are_explained() {
        let base = Args {
            node_id: Some(4),
            listen: Some("127.0.0.1:1".into()),
            internal_listen: Some("127.0.0.1:2".into()),
            data_dir: Some("/d".into()),
            cluster_members: Some(vec!["1@127.0.0.1:7101".into()]),
            tls_insecure_internal: true,
            ..Default::default()
        };
        assert!(base.load().unwrap_err().to_string().contains("not one of the cluster members"));
        let mut a = base.clone();
        a.cluster_members = Some(vec!["4@nohost".into()]);
        assert!(a.load().unwrap_err().to_string().contains("must look like"));
        let mut a = base.clone();
        a.node_id = None;
        assert!(a.load().unwrap_err().to_string().contains("RILL_NODE_ID"));
        let mut a = base.clone();
        a.internal_listen = None;
        assert!(a.load().unwrap_err().to_string().contains("RILL_INTERNAL_LISTEN"));
        let mut a = base;
        a.cluster_members = Some(vec!["4@127.0.0.1:7004".into()]);
        a.raft_election_timeout_min = Some(Duration::from_millis(50));
        assert!(a.load().unwrap_err().to_string().contains("raft timing"));
    }
}
