//! The named simulation scenarios (`chaos/run --list`).

use std::time::Duration;

/// A kind of fault the injector can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// A node's process dies and restarts later; the OS keeps its unsynced writes.
    Crash,
    /// One or several nodes lose power: unsynced writes are lost (a seed-chosen prefix survives).
    PowerFail,
    /// A node stops running for longer than the election timeout, then resumes believing
    /// nothing happened.
    Pause,
    /// One node cannot reach the other servers (clients still reach it).
    IsolateNode,
    /// The servers split into a minority and a majority.
    MajoritySplit,
    /// Two halves that cannot talk, except through one bridge node that sees both.
    Bridge,
    /// Messages from one node to another are dropped; the reverse direction works.
    OneWay,
    /// Clients cannot reach one node; the servers still can.
    ClientCut,
    /// A share of all messages is dropped.
    PacketLoss,
    /// Messages take up to seconds: requests arrive after their senders gave up.
    Delay,
}

/// Every fault kind.
pub const ALL_FAULTS: &[FaultKind] = &[
    FaultKind::Crash,
    FaultKind::PowerFail,
    FaultKind::Pause,
    FaultKind::IsolateNode,
    FaultKind::MajoritySplit,
    FaultKind::Bridge,
    FaultKind::OneWay,
    FaultKind::ClientCut,
    FaultKind::PacketLoss,
    FaultKind::Delay,
];

/// What producers wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcksLevel {
    /// acks=all: an acknowledged offset is a promise.
    All,
    /// acks=1: an acknowledged write may be lost and its offset reused.
    Leader,
}

/// Short-lived idempotent producers against small producer tables (`Scenario::producer_churn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerChurn {
    /// The nodes' `[limits] max-producers-per-partition`.
    pub max_per_partition: usize,
    /// The nodes' `[limits] producer-evictable-after`.
    pub evictable_after: Duration,
    /// A producer takes a new producer id after this many batches.
    pub new_id_every: u32,
    /// A producer gives a batch up (its outcome unknown) this long after first sending it, and
    /// goes on under a new producer id: the delivery timeout `evictable_after` must exceed, with
    /// the longest simulated message delay (3 s) on top, so that no retry of a stored batch
    /// reaches a partition after the partition forgot its producer.
    pub delivery_timeout: Duration,
}

/// A named scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// Name (the madsim test of the same name runs it).
    pub name: &'static str,
    /// One line for `chaos/run --list`.
    pub description: &'static str,
    /// Cluster size.
    pub nodes: u64,
    /// Partitions of the workload topic.
    pub partitions: u32,
    /// Replication factor of the workload topic.
    pub replication_factor: u32,
    /// Producer acknowledgement level.
    pub acks: AcksLevel,
    /// Producers are idempotent and retry every unknown outcome with the same sequence numbers.
    pub idempotent: bool,
    /// Producer processes.
    pub producers: u32,
    /// Consumer processes (each reads every partition).
    pub consumers: u32,
    /// A process deletes records (`DeleteRecords`) below random recent offsets.
    pub trimmer: bool,
    /// Settings of the workload topic beyond the defaults (e.g. `cleanup.policy`).
    pub topic_configs: &'static [(&'static str, &'static str)],
    /// Producers send keyed records from this many keys per partition, some of them tombstones
    /// (0: keyless records whose value is their id).
    pub keys_per_partition: u32,
    /// Idempotent producers take a new producer id every few batches, and the nodes' producer
    /// tables are small, so partitions fill them and must forget idle producers to admit new ones.
    pub producer_churn: Option<ProducerChurn>,
    /// How long faults are injected (simulated time).
    pub fault_phase: Duration,
    /// Fault kinds a seed may enable.
    pub faults: &'static [FaultKind],
    /// Part of the default set CI runs.
    pub default: bool,
}

/// Every scenario.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "acks_all_3",
        description: "3 nodes, 3 partitions RF 3, acks=all producers and assign-mode consumers under every fault kind",
        nodes: 3,
        partitions: 3,
        replication_factor: 3,
        acks: AcksLevel::All,
        idempotent: false,
        producers: 3,
        consumers: 2,
        trimmer: false,
        topic_configs: &[],
        keys_per_partition: 0,
        producer_churn: None,
        fault_phase: Duration::from_secs(20),
        faults: ALL_FAULTS,
        default: true,
    },
    Scenario {
        name: "acks_all_5",
        description: "5 nodes, 4 partitions RF 3, acks=all under every fault kind (splits and bridges with more shapes)",
        nodes: 5,
        partitions: 4,
        replication_factor: 3,
        acks: AcksLevel::All,
        idempotent: false,
        producers: 3,
        consumers: 2,
        trimmer: false,
        topic_configs: &[],
        keys_per_partition: 0,
        producer_churn: None,
        fault_phase: Duration::from_secs(20),
        faults: ALL_FAULTS,
        default: true,
    },
    Scenario {
        name: "acks_leader_3",
        description: "3 nodes, acks=1: checks only what acks=1 promises (synced on the leader; reads consistent, no duplicates, no skips)",
        nodes: 3,
        partitions: 2,
        replication_factor: 3,
        acks: AcksLevel::Leader,
        idempotent: false,
        producers: 2,
        consumers: 2,
        trimmer: false,
        topic_configs: &[],
        keys_per_partition: 0,
        producer_churn: None,
        fault_phase: Duration::from_secs(15),
        faults: ALL_FAULTS,
        default: true,
    },
    Scenario {
        name: "idempotence",
        description: "3 nodes, idempotent producers that retry every unknown outcome with the same sequence numbers: no duplicates, no loss, under every fault kind",
        nodes: 3,
        partitions: 3,
        replication_factor: 3,
        acks: AcksLevel::All,
        idempotent: true,
        producers: 3,
        consumers: 2,
        trimmer: false,
        topic_configs: &[],
        keys_per_partition: 0,
        producer_churn: None,
        fault_phase: Duration::from_secs(20),
        faults: ALL_FAULTS,
        default: true,
    },
    Scenario {
        name: "producer_churn",
        description: "3 nodes, idempotent producers taking a new producer id every 20 batches against producer tables of 8 per partition that forget producers idle for 8 s: a new producer is admitted once others are idle that long, and no retry of a stored batch is stored twice or refused as unknown, under every fault kind",
        nodes: 3,
        partitions: 2,
        replication_factor: 3,
        acks: AcksLevel::All,
        idempotent: true,
        producers: 4,
        consumers: 1,
        trimmer: false,
        topic_configs: &[],
        keys_per_partition: 0,
        producer_churn: Some(ProducerChurn {
            max_per_partition: 8,
            evictable_after: Duration::from_secs(8),
            new_id_every: 20,
            delivery_timeout: Duration::from_millis(2500),
        }),
        fault_phase: Duration::from_secs(25),
        faults: ALL_FAULTS,
        default: true,
    },
    Scenario {
        name: "trims",
        description: "3 nodes, acks=all producers, consumers and a process deleting records (DeleteRecords) under every fault kind: acknowledged deletions stay, nothing else is deleted, nothing deleted is served",
        nodes: 3,
        partitions: 2,
        replication_factor: 3,
        acks: AcksLevel::All,
        idempotent: false,
        producers: 2,
        consumers: 2,
        trimmer: true,
        topic_configs: &[],
        keys_per_partition: 0,
        producer_churn: None,
        fault_phase: Duration::from_secs(20),
        faults: ALL_FAULTS,
        default: true,
    },
    Scenario {
        name: "compaction",
        description: "3 nodes, a compacted topic (cleanup.policy=compact, delete.retention.ms=1000): acks=all producers of keyed records and tombstones from 6 keys per partition, consumers, under every fault kind: compaction removes only superseded records and expired tombstones, offsets never shift, replicas agree modulo compaction",
        nodes: 3,
        partitions: 2,
        replication_factor: 3,
        acks: AcksLevel::All,
        idempotent: false,
        producers: 2,
        consumers: 2,
        trimmer: false,
        topic_configs: &[
            ("cleanup.policy", "compact"),
            ("delete.retention.ms", "1000"),
            ("min.compaction.lag.ms", "0"),
        ],
        keys_per_partition: 6,
        producer_churn: None,
        fault_phase: Duration::from_secs(20),
        faults: ALL_FAULTS,
        default: true,
    },
];

impl Scenario {
    /// Whether the workload topic is compacted (its `cleanup.policy` includes `compact`).
    pub fn compacted(&self) -> bool {
        self.topic_configs.iter().any(|(k, v)| *k == "cleanup.policy" && v.split(',').any(|p| p.trim() == "compact"))
    }
}

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}
