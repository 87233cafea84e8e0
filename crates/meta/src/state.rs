//! The metadata state and the commands that change it.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{ConfigEdits, TopicConfig};
use crate::error::{MetaError, MetaErrorKind};
use crate::group_config::{check_group_id, edit_entries, GroupConfigEntries, ShareGroupConfig};
use crate::placement;

pub use rill_raft::{GroupId, NodeId};

/// Longest topic name (Kafka's limit).
pub const MAX_TOPIC_NAME_LEN: usize = 249;
/// Most partitions one topic may have. Every partition is a Raft group with its own tasks and
/// heartbeats; beyond this a topic is almost certainly a mistake.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 4096;

/// A cluster node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node id (≥ 1).
    pub id: NodeId,
    /// `host:port` clients reach it at (its client listener); empty until the node has announced
    /// it (the metadata leader registers founding members by their internal address first).
    pub addr: String,
    /// `host:port` the other nodes reach it at (its internal listener); empty in data written
    /// before the listeners were split, when [`NodeInfo::addr`] served both.
    pub internal_addr: String,
    /// `host:port` Kafka clients reach it at (its Kafka listener); empty when it has none.
    pub kafka_addr: String,
}

impl NodeInfo {
    /// The address other nodes reach it at.
    pub fn peer_addr(&self) -> &str {
        if self.internal_addr.is_empty() {
            &self.addr
        } else {
            &self.internal_addr
        }
    }
}

/// One partition's replica assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionAssignment {
    /// The partition's Raft group.
    pub group: GroupId,
    /// Replica node ids; the first is the preferred leader.
    pub replicas: Vec<NodeId>,
}

/// What a topic's partitions hold, and so which state machine their Raft groups run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum PartitionKind {
    /// A log of record batches (every topic a client creates).
    #[default]
    Records,
    /// `__consumer_offsets`: consumer groups' committed offsets (the group coordinator).
    ConsumerOffsets,
    /// `__transaction_state`: transactional ids and their producers (the transaction
    /// coordinator).
    TransactionState,
}

impl PartitionKind {
    /// The internal topic of a state kind; `None` for records.
    pub fn internal_topic(self) -> Option<&'static str> {
        match self {
            Self::Records => None,
            Self::ConsumerOffsets => Some(CONSUMER_OFFSETS_TOPIC),
            Self::TransactionState => Some(TRANSACTION_STATE_TOPIC),
        }
    }

    /// True for the kinds of internal topics (state partitions).
    pub fn is_internal(self) -> bool {
        self != Self::Records
    }

    /// The kind's name, as `rill topic describe` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Records => "records",
            Self::ConsumerOffsets => "consumer-offsets",
            Self::TransactionState => "transaction-state",
        }
    }
}

/// The internal topic holding consumer groups' state (Kafka's name).
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The internal topic holding transactions' state (Kafka's name).
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// A topic's stable id: 16 random bytes drawn when it is created (Kafka's KIP-516 topic ids), so
/// a topic deleted and re-created under the same name is never taken for the old one.
pub type TopicId = [u8; 16];

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    /// Cluster-unique number, never reused (seeds replica placement).
    pub id: u32,
    /// The topic's stable id.
    pub topic_id: TopicId,
    /// Name.
    pub name: String,
    /// Replication factor.
    pub replication_factor: u32,
    /// Partitions, indexed by partition number.
    pub partitions: Vec<PartitionAssignment>,
    /// Settings.
    pub config: TopicConfig,
    /// What its partitions hold.
    pub kind: PartitionKind,
}

impl TopicMeta {
    /// True for an internal topic (a state partition kind: written by the cluster only).
    pub fn is_internal(&self) -> bool {
        self.kind.is_internal()
    }
}

/// Everything group 0 replicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaState {
    /// Nodes by id.
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicMeta>,
    /// Next topic id to hand out.
    pub next_topic_id: u32,
    /// Next partition group id to hand out (group 0 is the metadata itself).
    pub next_group_id: GroupId,
    /// Count of applied commands (changes whenever the state does).
    pub version: u64,
    /// The next producer id to hand out (ids start at 1 and are never reused).
    pub next_producer_id: i64,
    /// Raft groups of deleted topics. Every node removes their data, including nodes that were
    /// down when the topic was deleted. Group ids are never reused.
    pub deleted_groups: BTreeSet<GroupId>,
    /// Node ids an operator admitted to join (`rill cluster admit`) that have not registered
    /// yet. A node that is neither a founding member, registered, nor admitted cannot join,
    /// whatever certificate it holds; registering consumes the admission.
    pub admitted: BTreeSet<NodeId>,
    /// The cluster's id as Kafka clients see it: set once, by the first metadata leader
    /// ([`MetaCommand::SetClusterId`]), and never changed; empty until then.
    pub cluster_id: String,
    /// Groups' settings (share groups), by group id: only the keys an operator set
    /// ([`crate::group_config`]).
    pub group_configs: BTreeMap<String, GroupConfigEntries>,
}

/// A change to the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaCommand {
    /// Records the cluster's nodes (idempotent; the bootstrap members register themselves).
    RegisterNodes { nodes: Vec<NodeInfo> },
    /// Admits node `id` to join (or, with `revoke`, withdraws an admission not used yet).
    AdmitNode { id: NodeId, revoke: bool },
    /// Creates a topic. Replicas go to `live_nodes` (the nodes the proposer found reachable);
    /// empty means every registered node.
    CreateTopic {
        name: String,
        /// Drawn by the proposer (state machines read no randomness); refused if taken.
        topic_id: TopicId,
        /// Records for client topics; a state kind only for the internal topics, which the
        /// cluster creates at start under their reserved names.
        kind: PartitionKind,
        partitions: u32,
        replication_factor: u32,
        configs: Vec<(String, String)>,
        live_nodes: Vec<NodeId>,
    },
    /// Deletes a topic: its replicas stop and their data is removed; the name becomes free.
    DeleteTopic { name: String },
    /// Changes topic settings: keys set, reset to their defaults, or (lists) items appended
    /// and subtracted, against the settings as they are when this applies.
    AlterTopicConfig { name: String, edits: ConfigEdits },
    /// Reserves `count` producer ids for one node to hand out.
    AllocateProducerIds { count: u32 },
    /// Grows a topic to `total` partitions (never shrinks), placing the new replicas on
    /// `live_nodes` (empty means every registered node).
    CreatePartitions { name: String, total: u32, live_nodes: Vec<NodeId> },
    /// Sets the cluster's id (drawn by the proposer) unless it has one already: the first
    /// applied wins, so every node reports the same id for the cluster's whole life.
    SetClusterId { cluster_id: String },
    /// Changes a group's settings: keys set, keys reset to their defaults (checked as a whole
    /// when this applies).
    AlterGroupConfig { group: String, set: Vec<(String, String)>, reset: Vec<String> },
}

/// The outcome of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaResult {
    /// Nodes recorded.
    NodesRegistered,
    /// The topic as created.
    TopicCreated(TopicMeta),
    /// The topic as it was when deleted.
    TopicDeleted(TopicMeta),
    /// The topic after the change (config altered or partitions added).
    TopicUpdated(TopicMeta),
    /// Producer ids `first .. first + count` are reserved for the proposer.
    ProducerIds { first: i64, count: u32 },
    /// An admission recorded or withdrawn.
    AdmissionChanged,
    /// The cluster's id after the command.
    ClusterId(String),
    /// A group's settings after the change: the keys set.
    GroupConfigUpdated { group: String, entries: GroupConfigEntries },
    /// Refused; the state did not change.
    Refused(MetaError),
}

fn unknown_topic(name: &str) -> MetaError {
    MetaError::new(MetaErrorKind::UnknownTopic, format!("unknown topic {name:?}"))
}

/// The kind whose internal topic `name` is reserved for (records for any other name).
fn reserved_kind(name: &str) -> PartitionKind {
    match name {
        CONSUMER_OFFSETS_TOPIC => PartitionKind::ConsumerOffsets,
        TRANSACTION_STATE_TOPIC => PartitionKind::TransactionState,
        _ => PartitionKind::Records,
    }
}

/// Checks a topic name: 1–249 characters from `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), MetaError> {
    let bad =
        |why: String| Err(MetaError::new(MetaErrorKind::InvalidTopic, format!("invalid topic name {name:?}: {why}")));
    if name.is_empty() {
        return bad("it is empty".into());
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return bad(format!("longer than {MAX_TOPIC_NAME_LEN} characters"));
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are reserved".into());
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return bad(format!("character {c:?} is not allowed (use letters, digits, '.', '_' and '-')"));
    }
    Ok(())
}

impl MetaState {
    /// Applies `cmd`. Deterministic: the same state and command give the same result everywhere.
    pub fn apply(&mut self, cmd: MetaCommand) -> MetaResult {
        let result = match cmd {
            MetaCommand::RegisterNodes { nodes } => {
                // An empty address leaves the known one: the metadata leader registers a founding
                // member by its internal address before the member announces its client address,
                // and the two proposals may be applied in either order.
                for n in nodes {
                    self.admitted.remove(&n.id);
                    let known = self.nodes.entry(n.id).or_insert_with(|| NodeInfo {
                        id: n.id,
                        addr: String::new(),
                        internal_addr: String::new(),
                        kafka_addr: String::new(),
                    });
                    // A node announcing itself (its client address) says whether it has a Kafka
                    // listener; a registration by internal address only says nothing of it.
                    if !n.addr.is_empty() {
                        known.addr = n.addr;
                        known.kafka_addr = n.kafka_addr;
                    }
                    if !n.internal_addr.is_empty() {
                        known.internal_addr = n.internal_addr;
                    }
                }
                MetaResult::NodesRegistered
            }
            MetaCommand::SetClusterId { cluster_id } => {
                if self.cluster_id.is_empty() {
                    self.cluster_id = cluster_id;
                }
                MetaResult::ClusterId(self.cluster_id.clone())
            }
            MetaCommand::AdmitNode { id, revoke } => {
                // A registered node needs no admission: it may rejoin after a restart.
                if revoke {
                    self.admitted.remove(&id);
                } else if !self.nodes.contains_key(&id) {
                    self.admitted.insert(id);
                }
                MetaResult::AdmissionChanged
            }
            MetaCommand::CreateTopic { name, topic_id, kind, partitions, replication_factor, configs, live_nodes } => {
                match self.create_topic(name, topic_id, kind, partitions, replication_factor, &configs, &live_nodes) {
                    Ok(t) => MetaResult::TopicCreated(t),
                    Err(e) => MetaResult::Refused(e),
                }
            }
            MetaCommand::DeleteTopic { name } => match self.check_delete(&name) {
                Err(e) => MetaResult::Refused(e),
                Ok(()) => match self.topics.remove(&name) {
                    Some(t) => {
                        self.deleted_groups.extend(t.partitions.iter().map(|p| p.group));
                        MetaResult::TopicDeleted(t)
                    }
                    None => MetaResult::Refused(unknown_topic(&name)),
                },
            },
            MetaCommand::AlterTopicConfig { name, edits } => match self.alter_config(&name, &edits) {
                Ok(t) => MetaResult::TopicUpdated(t),
                Err(e) => MetaResult::Refused(e),
            },
            MetaCommand::AlterGroupConfig { group, set, reset } => {
                match self.check_alter_group_config(&group, &set, &reset) {
                    Err(e) => MetaResult::Refused(e),
                    Ok(entries) => {
                        if entries.is_empty() {
                            self.group_configs.remove(&group);
                        } else {
                            self.group_configs.insert(group.clone(), entries.clone());
                        }
                        MetaResult::GroupConfigUpdated { group, entries }
                    }
                }
            }
            MetaCommand::AllocateProducerIds { count } => {
                let first = self.next_producer_id.max(1);
                self.next_producer_id = first + i64::from(count);
                MetaResult::ProducerIds { first, count }
            }
            MetaCommand::CreatePartitions { name, total, live_nodes } => {
                match self.create_partitions(&name, total, &live_nodes) {
                    Ok(t) => MetaResult::TopicUpdated(t),
                    Err(e) => MetaResult::Refused(e),
                }
            }
        };
        if !matches!(result, MetaResult::Refused(_)) {
            self.version += 1;
        }
        result
    }

    /// Checks changing `group`'s settings without changing them: the keys it would then have.
    pub fn check_alter_group_config(
        &self,
        group: &str,
        set: &[(String, String)],
        reset: &[String],
    ) -> Result<GroupConfigEntries, MetaError> {
        check_group_id(group)?;
        let empty = GroupConfigEntries::new();
        let current = self.group_configs.get(group).unwrap_or(&empty);
        let (entries, config) = edit_entries(current, set, reset)?;
        // A dead-letter topic named now must exist and be a client topic; one named before
        // and deleted since does not stop other edits (its copies wait for it, docs/queues.md).
        let named_now = set.iter().any(|(k, _)| k == crate::group_config::DEAD_LETTER_TOPIC_KEY);
        if let (true, Some(topic)) = (named_now, &config.dead_letter_topic) {
            match self.topics.get(topic) {
                None => {
                    return Err(MetaError::new(
                        MetaErrorKind::UnknownTopic,
                        format!("dead-letter topic {topic} does not exist; create it first"),
                    ))
                }
                Some(t) if t.is_internal() => {
                    return Err(MetaError::new(
                        MetaErrorKind::InvalidConfig,
                        format!("{topic} is an internal topic; it cannot take dead letters"),
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(entries)
    }

    /// `group`'s settings as a share group: its keys set over the defaults. Stored keys a
    /// release does not know (written by a newer one) leave the defaults.
    pub fn share_group_config(&self, group: &str) -> ShareGroupConfig {
        self.group_configs.get(group).map(ShareGroupConfig::from_stored).unwrap_or_default()
    }

    /// Checks that `name` may be deleted: it exists and is not internal.
    pub fn check_delete(&self, name: &str) -> Result<(), MetaError> {
        match self.topics.get(name) {
            None => Err(unknown_topic(name)),
            Some(t) if t.is_internal() => Err(MetaError::new(
                MetaErrorKind::InvalidTopic,
                format!("{name} is an internal topic (the cluster's {} state); it cannot be deleted", t.kind.name()),
            )),
            Some(_) => Ok(()),
        }
    }

    /// The internal topic of `kind`, once the cluster created it.
    pub fn internal_topic(&self, kind: PartitionKind) -> Option<&TopicMeta> {
        self.topics.get(kind.internal_topic()?).filter(|t| t.kind == kind)
    }

    /// Checks a create request of a client topic against the current state without changing it.
    pub fn check_create(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: u32,
        configs: &[(String, String)],
        live_nodes: &[NodeId],
    ) -> Result<TopicConfig, MetaError> {
        self.check_create_kind(name, PartitionKind::Records, partitions, replication_factor, configs, live_nodes)
    }

    fn check_create_kind(
        &self,
        name: &str,
        kind: PartitionKind,
        partitions: u32,
        replication_factor: u32,
        configs: &[(String, String)],
        live_nodes: &[NodeId],
    ) -> Result<TopicConfig, MetaError> {
        validate_topic_name(name)?;
        if kind.internal_topic() != reserved_kind(name).internal_topic() {
            return Err(MetaError::new(
                MetaErrorKind::InvalidTopic,
                match kind.internal_topic() {
                    Some(internal) => format!("a {} topic must be named {internal}", kind.name()),
                    None => format!("{name:?} is reserved for the cluster's internal topic; choose another name"),
                },
            ));
        }
        if self.topics.contains_key(name) {
            return Err(MetaError::new(MetaErrorKind::TopicExists, format!("topic {name:?} already exists")));
        }
        if partitions == 0 || partitions > MAX_PARTITIONS_PER_TOPIC {
            return Err(MetaError::new(
                MetaErrorKind::InvalidPartitions,
                format!("partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {partitions}"),
            ));
        }
        if replication_factor == 0 {
            return Err(MetaError::new(
                MetaErrorKind::InvalidReplicationFactor,
                "replication factor must be at least 1",
            ));
        }
        self.check_placeable(replication_factor, live_nodes)?;
        TopicConfig::from_entries(replication_factor, configs)
    }

    /// The nodes new replicas may go to: the live ones that are registered (all registered nodes
    /// when no liveness view is given).
    pub fn placement_nodes(&self, live_nodes: &[NodeId]) -> Vec<NodeId> {
        if live_nodes.is_empty() {
            return self.nodes.keys().copied().collect();
        }
        let mut ids: Vec<NodeId> = live_nodes.iter().copied().filter(|n| self.nodes.contains_key(n)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn check_placeable(&self, replication_factor: u32, live_nodes: &[NodeId]) -> Result<(), MetaError> {
        let registered = self.nodes.len() as u32;
        let usable = self.placement_nodes(live_nodes);
        if replication_factor > registered {
            return Err(MetaError::new(
                MetaErrorKind::InvalidReplicationFactor,
                format!("replication factor {replication_factor} is larger than the {registered} node(s) in the cluster; use at most {registered}"),
            ));
        }
        if replication_factor as usize > usable.len() {
            let down: Vec<NodeId> = self.nodes.keys().copied().filter(|n| !usable.contains(n)).collect();
            return Err(MetaError::new(
                MetaErrorKind::InvalidReplicationFactor,
                format!(
                    "replication factor {replication_factor} needs {replication_factor} live nodes, but only {} of {registered} are reachable (down: {down:?}); bring them back or use a smaller factor",
                    usable.len()
                ),
            ));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)] // the fields of one command
    fn create_topic(
        &mut self,
        name: String,
        topic_id: TopicId,
        kind: PartitionKind,
        partitions: u32,
        replication_factor: u32,
        configs: &[(String, String)],
        live_nodes: &[NodeId],
    ) -> Result<TopicMeta, MetaError> {
        let config = self.check_create_kind(&name, kind, partitions, replication_factor, configs, live_nodes)?;
        if topic_id == [0; 16] || self.topics.values().any(|t| t.topic_id == topic_id) {
            return Err(MetaError::new(
                MetaErrorKind::TopicExists,
                format!("the id drawn for topic {name:?} is zero or taken; create it again (a new id is drawn)"),
            ));
        }
        let id = self.next_topic_id;
        let node_ids = self.placement_nodes(live_nodes);
        let first_group = self.next_group_id.max(1);
        let parts = placement::place(id, partitions, replication_factor, &node_ids)
            .into_iter()
            .enumerate()
            .map(|(i, replicas)| PartitionAssignment { group: first_group + i as u64, replicas })
            .collect::<Vec<_>>();
        self.next_topic_id += 1;
        self.next_group_id = first_group + u64::from(partitions);
        let topic = TopicMeta { id, topic_id, name: name.clone(), replication_factor, partitions: parts, config, kind };
        self.topics.insert(name, topic.clone());
        Ok(topic)
    }

    /// Checks a config change against the current state without applying it.
    pub fn check_alter_config(&self, name: &str, edits: &ConfigEdits) -> Result<TopicConfig, MetaError> {
        let t = self.topics.get(name).ok_or_else(|| unknown_topic(name))?;
        t.config.edited(t.replication_factor, edits)
    }

    fn alter_config(&mut self, name: &str, edits: &ConfigEdits) -> Result<TopicMeta, MetaError> {
        let config = self.check_alter_config(name, edits)?;
        let t = self.topics.get_mut(name).ok_or_else(|| unknown_topic(name))?;
        t.config = config;
        Ok(t.clone())
    }

    /// Checks a partition increase against the current state without applying it.
    pub fn check_create_partitions(
        &self,
        name: &str,
        total: u32,
        live_nodes: &[NodeId],
    ) -> Result<&TopicMeta, MetaError> {
        let t = self.topics.get(name).ok_or_else(|| unknown_topic(name))?;
        if t.is_internal() {
            return Err(MetaError::new(
                MetaErrorKind::InvalidPartitions,
                format!("{name} is an internal topic: its partition count decides where ids live and cannot change"),
            ));
        }
        let now = t.partitions.len() as u32;
        if total <= now {
            return Err(MetaError::new(
                MetaErrorKind::InvalidPartitions,
                format!("topic {name:?} has {now} partition(s); the count can only grow, so ask for more than {now}"),
            ));
        }
        if total > MAX_PARTITIONS_PER_TOPIC {
            return Err(MetaError::new(
                MetaErrorKind::InvalidPartitions,
                format!("partitions must be at most {MAX_PARTITIONS_PER_TOPIC}, got {total}"),
            ));
        }
        self.check_placeable(t.replication_factor, live_nodes)?;
        Ok(t)
    }

    fn create_partitions(&mut self, name: &str, total: u32, live_nodes: &[NodeId]) -> Result<TopicMeta, MetaError> {
        let t = self.check_create_partitions(name, total, live_nodes)?;
        let (id, rf, now) = (t.id, t.replication_factor, t.partitions.len());
        let node_ids = self.placement_nodes(live_nodes);
        let first_group = self.next_group_id.max(1);
        let added: Vec<PartitionAssignment> = placement::place(id, total, rf, &node_ids)
            .into_iter()
            .skip(now)
            .enumerate()
            .map(|(i, replicas)| PartitionAssignment { group: first_group + i as u64, replicas })
            .collect();
        self.next_group_id = first_group + added.len() as u64;
        let t = self.topics.get_mut(name).ok_or_else(|| unknown_topic(name))?;
        t.partitions.extend(added);
        Ok(t.clone())
    }

    /// Partitions (topic, partition number, assignment) that include `node`.
    pub fn replicas_of(&self, node: NodeId) -> Vec<(&TopicMeta, u32, &PartitionAssignment)> {
        self.topics
            .values()
            .flat_map(|t| t.partitions.iter().enumerate().map(move |(i, p)| (t, i as u32, p)))
            .filter(|(_, _, p)| p.replicas.contains(&node))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A distinct topic id per name (tests draw no randomness).
    fn id_for(name: &str) -> TopicId {
        let mut id = [7u8; 16];
        for (i, b) in name.bytes().enumerate() {
            id[i % 16] ^= b.wrapping_add(i as u8);
        }
        id
    }

    fn three_nodes() -> MetaState {
        let mut s = MetaState::default();
        let nodes = (1..=3)
            .map(|id| NodeInfo {
                id,
                addr: format!("127.0.0.1:700{id}"),
                internal_addr: format!("127.0.0.1:710{id}"),
                kafka_addr: String::new(),
            })
            .collect();
        assert_eq!(s.apply(MetaCommand::RegisterNodes { nodes }), MetaResult::NodesRegistered);
        s
    }

    #[test]
    fn an_admission_lasts_until_the_node_registers_or_it_is_revoked() {
        let mut s = three_nodes();
        let admit = |id, revoke| MetaCommand::AdmitNode { id, revoke };
        assert_eq!(s.apply(admit(4, false)), MetaResult::AdmissionChanged);
        assert_eq!(s.apply(admit(5, false)), MetaResult::AdmissionChanged);
        assert_eq!(s.admitted, BTreeSet::from([4, 5]));
        // Registered nodes need none.
        s.apply(admit(2, false));
        assert!(!s.admitted.contains(&2));
        let four = NodeInfo { id: 4, addr: "h:7004".into(), internal_addr: "h:7104".into(), kafka_addr: String::new() };
        s.apply(MetaCommand::RegisterNodes { nodes: vec![four] });
        assert_eq!(s.admitted, BTreeSet::from([5]), "registering consumes the admission");
        s.apply(admit(5, true));
        assert!(s.admitted.is_empty());
    }

    fn create(s: &mut MetaState, name: &str, p: u32, rf: u32) -> MetaResult {
        s.apply(MetaCommand::CreateTopic {
            name: name.into(),
            topic_id: id_for(name),
            kind: PartitionKind::Records,
            partitions: p,
            replication_factor: rf,
            configs: vec![],
            live_nodes: vec![],
        })
    }

    #[test]
    fn an_empty_address_never_replaces_a_known_one() {
        let node = |addr: &str, internal: &str| NodeInfo {
            id: 2,
            addr: addr.into(),
            internal_addr: internal.into(),
            kafka_addr: String::new(),
        };
        let mut s = MetaState::default();
        // The member announces itself, then the leader's earlier "internal address only"
        // registration is applied: the client address stays.
        s.apply(MetaCommand::RegisterNodes { nodes: vec![node("h:7002", "h:7102")] });
        s.apply(MetaCommand::RegisterNodes { nodes: vec![node("", "h:7102")] });
        assert_eq!(s.nodes[&2], node("h:7002", "h:7102"));
        s.apply(MetaCommand::RegisterNodes { nodes: vec![node("h:9002", "")] });
        assert_eq!(s.nodes[&2], node("h:9002", "h:7102"));
        assert_eq!(s.nodes[&2].peer_addr(), "h:7102");
        assert_eq!(node("h:1", "").peer_addr(), "h:1", "data from before the split: one address");
    }

    #[test]
    fn a_nodes_own_announcement_says_whether_it_has_a_kafka_listener() {
        let node = |addr: &str, kafka: &str| NodeInfo {
            id: 2,
            addr: addr.into(),
            internal_addr: "h:7102".into(),
            kafka_addr: kafka.into(),
        };
        let mut s = MetaState::default();
        s.apply(MetaCommand::RegisterNodes { nodes: vec![node("h:7002", "h:9092")] });
        // A registration by internal address only leaves it.
        s.apply(MetaCommand::RegisterNodes { nodes: vec![node("", "")] });
        assert_eq!(s.nodes[&2].kafka_addr, "h:9092");
        // The node restarted without one: its announcement clears it.
        s.apply(MetaCommand::RegisterNodes { nodes: vec![node("h:7002", "")] });
        assert_eq!(s.nodes[&2], node("h:7002", ""));
    }

    #[test]
    fn the_first_cluster_id_applied_stays() {
        let mut s = MetaState::default();
        let set = |id: &str| MetaCommand::SetClusterId { cluster_id: id.into() };
        assert_eq!(s.apply(set("first")), MetaResult::ClusterId("first".into()));
        // A second leader's proposal, drawn before it saw the first, changes nothing.
        assert_eq!(s.apply(set("second")), MetaResult::ClusterId("first".into()));
        assert_eq!(s.cluster_id, "first");
    }

    #[test]
    fn creates_topics_with_fresh_group_ids() {
        let mut s = three_nodes();
        let MetaResult::TopicCreated(a) = create(&mut s, "a", 3, 3) else { panic!() };
        let MetaResult::TopicCreated(b) = create(&mut s, "b", 2, 1) else { panic!() };
        let groups: Vec<GroupId> = a.partitions.iter().chain(&b.partitions).map(|p| p.group).collect();
        assert_eq!(groups, vec![1, 2, 3, 4, 5]);
        // Node 1 holds every replica of "a"; "b" (topic id 1, RF 1) starts on node 2.
        assert_eq!(s.replicas_of(1).len(), 3);
        assert_eq!(s.replicas_of(2).len(), 4);
    }

    #[test]
    fn refusals_leave_state_unchanged() {
        let mut s = three_nodes();
        assert!(matches!(create(&mut s, "a", 1, 3), MetaResult::TopicCreated(_)));
        let before = s.clone();
        for (name, p, rf, kind) in [
            ("a", 1, 3, MetaErrorKind::TopicExists),
            ("bad/name", 1, 1, MetaErrorKind::InvalidTopic),
            ("z", 0, 1, MetaErrorKind::InvalidPartitions),
            ("z", 1, 4, MetaErrorKind::InvalidReplicationFactor),
            ("z", 1, 0, MetaErrorKind::InvalidReplicationFactor),
        ] {
            match create(&mut s, name, p, rf) {
                MetaResult::Refused(e) => assert_eq!(e.kind, kind, "{e}"),
                other => panic!("expected refusal, got {other:?}"),
            }
        }
        assert_eq!(s, before);
    }

    #[test]
    fn delete_frees_the_name_and_remembers_the_groups() {
        let mut s = three_nodes();
        let MetaResult::TopicCreated(a) = create(&mut s, "a", 2, 3) else { panic!() };
        assert!(matches!(s.apply(MetaCommand::DeleteTopic { name: "a".into() }), MetaResult::TopicDeleted(_)));
        assert!(s.deleted_groups.contains(&a.partitions[0].group) && s.deleted_groups.contains(&a.partitions[1].group));
        let MetaResult::TopicCreated(again) = create(&mut s, "a", 1, 3) else { panic!() };
        assert!(again.id > a.id && again.partitions[0].group > a.partitions[1].group, "ids are never reused");
        assert!(matches!(s.apply(MetaCommand::DeleteTopic { name: "nope".into() }), MetaResult::Refused(_)));
    }

    #[test]
    fn partitions_only_grow_and_new_ones_get_fresh_groups() {
        let mut s = three_nodes();
        let MetaResult::TopicCreated(t) = create(&mut s, "g", 2, 3) else { panic!() };
        let MetaResult::TopicUpdated(u) =
            s.apply(MetaCommand::CreatePartitions { name: "g".into(), total: 5, live_nodes: vec![] })
        else {
            panic!()
        };
        assert_eq!(u.partitions.len(), 5);
        assert_eq!(&u.partitions[..2], &t.partitions[..], "existing partitions keep their groups and replicas");
        let leaders: BTreeSet<NodeId> = u.partitions.iter().map(|p| p.replicas[0]).collect();
        assert_eq!(leaders.len(), 3);
        for total in [5, 3] {
            match s.apply(MetaCommand::CreatePartitions { name: "g".into(), total, live_nodes: vec![] }) {
                MetaResult::Refused(e) => assert_eq!(e.kind, MetaErrorKind::InvalidPartitions),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_groups_settings_are_set_reset_checked_and_forgotten_when_all_reset() {
        let mut s = MetaState::default();
        let alter = |set: &[(&str, &str)], reset: &[&str]| MetaCommand::AlterGroupConfig {
            group: "jobs".into(),
            set: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            reset: reset.iter().map(|k| k.to_string()).collect(),
        };
        let MetaResult::GroupConfigUpdated { entries, .. } =
            s.apply(alter(&[("share.delivery.count.limit", "3")], &[]))
        else {
            panic!()
        };
        assert_eq!(entries.len(), 1);
        assert_eq!(s.share_group_config("jobs").delivery_limit, 3);
        assert_eq!(s.share_group_config("other"), ShareGroupConfig::default());
        let version = s.version;
        assert!(matches!(s.apply(alter(&[("share.delivery.count.limit", "0")], &[])), MetaResult::Refused(_)));
        assert_eq!((s.version, s.share_group_config("jobs").delivery_limit), (version, 3), "a refusal changes nothing");
        s.apply(alter(&[], &["share.delivery.count.limit"]));
        assert!(s.group_configs.is_empty(), "a group with every key reset is not kept");
    }

    #[test]
    fn a_dead_letter_topic_must_exist_and_be_a_client_topic_when_named() {
        let mut s = three_nodes();
        let name = |topic: &str| MetaCommand::AlterGroupConfig {
            group: "jobs".into(),
            set: vec![(crate::group_config::DEAD_LETTER_TOPIC_KEY.to_string(), topic.to_string())],
            reset: vec![],
        };
        let refused = |r: MetaResult| match r {
            MetaResult::Refused(e) => e.message,
            other => panic!("{other:?}"),
        };
        assert!(refused(s.apply(name("jobs.dlq"))).contains("create it first"));
        create(&mut s, "jobs.dlq", 1, 3);
        assert!(matches!(s.apply(name("jobs.dlq")), MetaResult::GroupConfigUpdated { .. }));
        assert_eq!(s.share_group_config("jobs").dead_letter_topic.as_deref(), Some("jobs.dlq"));
    }

    #[test]
    fn alter_config_validates_against_the_topic() {
        let mut s = three_nodes();
        create(&mut s, "c", 1, 3);
        let set = vec![("min.insync.replicas".to_string(), "3".to_string())];
        let MetaResult::TopicUpdated(t) =
            s.apply(MetaCommand::AlterTopicConfig { name: "c".into(), edits: ConfigEdits::new(set, vec![]) })
        else {
            panic!()
        };
        assert_eq!(t.config.min_insync_replicas, 3);
        let MetaResult::TopicUpdated(t) = s.apply(MetaCommand::AlterTopicConfig {
            name: "c".into(),
            edits: ConfigEdits::new(vec![], vec!["min.insync.replicas".into()]),
        }) else {
            panic!()
        };
        assert_eq!(t.config.min_insync_replicas, 2);
        let bad = vec![("min.insync.replicas".to_string(), "4".to_string())];
        assert!(matches!(
            s.apply(MetaCommand::AlterTopicConfig { name: "c".into(), edits: ConfigEdits::new(bad, vec![]) }),
            MetaResult::Refused(_)
        ));
        // Two appends decided from the same state both land: each applies to what is there.
        let append = |item: &str| MetaCommand::AlterTopicConfig {
            name: "c".into(),
            edits: ConfigEdits { append: vec![("cleanup.policy".into(), item.into())], ..ConfigEdits::default() },
        };
        assert!(matches!(s.apply(append("compact")), MetaResult::TopicUpdated(_)));
        let MetaResult::TopicUpdated(t) = s.apply(append("delete")) else { panic!() };
        assert_eq!(t.config.cleanup_policy.as_str(), "compact,delete");
    }

    #[test]
    fn replicas_go_to_live_nodes_and_rf_beyond_them_is_refused() {
        let mut s = three_nodes();
        let cmd = |rf: u32, live: Vec<NodeId>| MetaCommand::CreateTopic {
            name: format!("t{rf}{}", live.len()),
            topic_id: id_for(&format!("t{rf}{}", live.len())),
            kind: PartitionKind::Records,
            partitions: 4,
            replication_factor: rf,
            configs: vec![],
            live_nodes: live,
        };
        let MetaResult::TopicCreated(t) = s.apply(cmd(2, vec![1, 3])) else { panic!() };
        assert!(t.partitions.iter().all(|p| !p.replicas.contains(&2)), "node 2 was down: {t:?}");
        match s.apply(cmd(3, vec![1, 3])) {
            MetaResult::Refused(e) => {
                assert_eq!(e.kind, MetaErrorKind::InvalidReplicationFactor);
                assert!(e.message.contains("only 2 of 3 are reachable") && e.message.contains("[2]"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn topic_ids_are_unique_and_never_zero() {
        let mut s = three_nodes();
        let MetaResult::TopicCreated(a) = create(&mut s, "a", 1, 3) else { panic!() };
        assert_eq!(a.topic_id, id_for("a"));
        let same_id = MetaCommand::CreateTopic {
            name: "b".into(),
            topic_id: a.topic_id,
            kind: PartitionKind::Records,
            partitions: 1,
            replication_factor: 3,
            configs: vec![],
            live_nodes: vec![],
        };
        assert!(matches!(s.apply(same_id), MetaResult::Refused(e) if e.message.contains("taken")));
        let zero = MetaCommand::CreateTopic {
            name: "b".into(),
            topic_id: [0; 16],
            kind: PartitionKind::Records,
            partitions: 1,
            replication_factor: 3,
            configs: vec![],
            live_nodes: vec![],
        };
        assert!(matches!(s.apply(zero), MetaResult::Refused(_)));
        assert!(s.apply(MetaCommand::DeleteTopic { name: "a".into() }) != MetaResult::NodesRegistered);
        let MetaResult::TopicCreated(again) = create(&mut s, "a", 1, 3) else { panic!() };
        assert_eq!(again.topic_id, a.topic_id, "this test draws ids from names; the server draws them at random");
    }

    #[test]
    fn internal_topics_have_reserved_names_and_cannot_be_deleted_or_grown() {
        let mut s = three_nodes();
        let internal = |name: &str, kind| MetaCommand::CreateTopic {
            name: name.into(),
            topic_id: id_for(name),
            kind,
            partitions: 4,
            replication_factor: 3,
            configs: vec![],
            live_nodes: vec![],
        };
        // A client cannot take the reserved names, nor create a state kind under another name.
        match create(&mut s, CONSUMER_OFFSETS_TOPIC, 1, 3) {
            MetaResult::Refused(e) => assert!(e.message.contains("reserved"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(s.apply(internal("offsets", PartitionKind::ConsumerOffsets)), MetaResult::Refused(_)));
        let MetaResult::TopicCreated(t) = s.apply(internal(CONSUMER_OFFSETS_TOPIC, PartitionKind::ConsumerOffsets))
        else {
            panic!()
        };
        assert!(t.is_internal() && t.kind == PartitionKind::ConsumerOffsets);
        assert_eq!(s.internal_topic(PartitionKind::ConsumerOffsets).map(|t| t.partitions.len()), Some(4));
        assert_eq!(s.internal_topic(PartitionKind::TransactionState), None);
        let before = s.clone();
        match s.apply(MetaCommand::DeleteTopic { name: CONSUMER_OFFSETS_TOPIC.into() }) {
            MetaResult::Refused(e) => assert!(e.message.contains("internal"), "{e}"),
            other => panic!("{other:?}"),
        }
        let grow = MetaCommand::CreatePartitions { name: CONSUMER_OFFSETS_TOPIC.into(), total: 8, live_nodes: vec![] };
        assert!(matches!(s.apply(grow), MetaResult::Refused(e) if e.kind == MetaErrorKind::InvalidPartitions));
        assert_eq!(s, before, "refusals change nothing");
    }

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut s = MetaState::default();
        let MetaResult::ProducerIds { first: a, count: 10 } = s.apply(MetaCommand::AllocateProducerIds { count: 10 })
        else {
            panic!()
        };
        let MetaResult::ProducerIds { first: b, .. } = s.apply(MetaCommand::AllocateProducerIds { count: 5 }) else {
            panic!()
        };
        assert_eq!((a, b), (1, 11));
    }

    #[test]
    fn topic_names_are_checked() {
        assert!(validate_topic_name("orders.v1_eu-west").is_ok());
        for bad in ["", ".", "..", "a b", "ü", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
    }
}
