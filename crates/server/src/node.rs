//! [`Node`]: the registry of one Rill node — its configuration, the metadata group, its
//! partition replicas (whatever their kind), the transport to its peers and its producer-id
//! block — and the reconciler that keeps the replicas in line with the metadata. What a node
//! does as a coordinator lives in its coordinator shards (`crate::coordinators`), made when it
//! leads an internal partition; the node only tells them when its replicas change.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ServerState};
use rill_broker::machine::SharedState;
use rill_broker::{Partition, Replica, StatePartition};
use rill_coordinator::{OffsetsMachine, TransactionsMachine};
use rill_meta::machine::{decode_result, encode_command};
use rill_meta::{MetaCommand, MetaResult, MetaState, MetaStateMachine, NodeInfo, PartitionKind, TopicMeta, META_GROUP};
use rill_proto::internal::cluster_client::ClusterClient;
use rill_proto::internal::ProposeMetaRequest;
use rill_raft::multi::StartedGroup;
use rill_raft::{GroupId, GroupOptions, MultiRaft, NodeId, Payload, Raft, Transport};
use rill_rt::sync::watch;
use rill_storage::{Engine, Syncer};
use tonic::transport::Channel;

use crate::config::{Config, InternalTls};
use crate::error::Result;

/// Producer ids a node reserves from the metadata at a time. Unused ids of a block are lost
/// when the node restarts; ids are 63-bit, so that costs nothing.
const PRODUCER_ID_BLOCK: u32 = 1000;

/// How long metadata proposals keep retrying while the metadata group has no leader.
const META_PROPOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between attempts to reach the metadata leader.
const META_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Why a metadata proposal failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    /// No metadata leader could be reached in time.
    #[error("the cluster metadata has no reachable leader ({0}); is a majority of nodes up?")]
    NoLeader(String),
    /// This node is stopping.
    #[error("node is shutting down")]
    ShuttingDown,
    /// The answer could not be decoded.
    #[error("bad metadata answer: {0}")]
    Internal(String),
}

/// A partition replica hosted on this node, by the kind of its topic.
#[derive(Clone)]
pub enum Hosted {
    /// A record partition.
    Records(Arc<Partition>),
    /// A `__consumer_offsets` partition (group coordinator state).
    Offsets(Arc<StatePartition<OffsetsMachine>>),
    /// A `__transaction_state` partition (transaction coordinator state).
    Transactions(Arc<StatePartition<TransactionsMachine>>),
}

impl Hosted {
    /// The parts every kind shares: its Raft group, leadership, state.
    pub fn replica(&self) -> &Replica {
        match self {
            Self::Records(p) => p,
            Self::Offsets(p) => p,
            Self::Transactions(p) => p,
        }
    }

    /// Its live state; a record partition's log start offset is the one it has applied.
    pub fn state(&self) -> rill_broker::ReplicaState {
        match self {
            Self::Records(p) => p.state(),
            other => other.replica().state(),
        }
    }

    /// About how many bytes of records it holds (0 for an internal topic's partition).
    pub fn retained_bytes(&self) -> u64 {
        match self {
            Self::Records(p) => p.retained_bytes(),
            _ => 0,
        }
    }

    /// A compacted topic's applied cleaning point (0 for anything else).
    pub fn cleaned_to(&self) -> u64 {
        match self {
            Self::Records(p) => p.cleaning_point().0,
            _ => 0,
        }
    }

    /// The first position its log still stores.
    pub fn stored_from(&self) -> u64 {
        self.replica().log().start_position()
    }

    /// The kind of its topic.
    pub fn kind(&self) -> PartitionKind {
        match self {
            Self::Records(_) => PartitionKind::Records,
            Self::Offsets(_) => PartitionKind::ConsumerOffsets,
            Self::Transactions(_) => PartitionKind::TransactionState,
        }
    }
}

/// One Rill node.
pub struct Node {
    config: Config,
    multi: Arc<MultiRaft>,
    meta_raft: Raft,
    meta: watch::Receiver<Arc<MetaState>>,
    replicas: RwLock<HashMap<GroupId, Hosted>>,
    /// The block of producer ids this node hands out: `next .. end`.
    producer_ids: rill_rt::sync::Mutex<(i64, i64)>,
    /// The node's certificates for the internal listener, kept current with their files
    /// (`None`: the insecure setting).
    tls: Option<Arc<rill_tls::ReloadingTls>>,
    /// What this node's compacted partitions share: one compaction pass at a time, paced.
    compaction: Arc<rill_broker::CompactionBudget>,
    /// Bumped whenever a replica starts or stops here: what the coordinator shards watch to
    /// follow this node's internal replicas.
    replicas_changed: watch::Sender<u64>,
    /// Where this node's record partitions send share groups' dead-letter copies.
    dead_letters: Arc<crate::dead_letters::NodeDeadLetters>,
}

impl Node {
    /// Opens the node's groups on `engine` and starts its background tasks.
    pub async fn start(config: Config, engine: Arc<dyn Engine>) -> Result<Arc<Self>> {
        let tls = match &config.internal_tls {
            InternalTls::Mutual(paths) => {
                let tls = rill_tls::ReloadingTls::load(paths.clone(), config.node_id)
                    .map_err(|e| crate::Error::Config(format!("internal TLS: {e}")))?;
                // Rotated files are picked up without a restart (docs/security.md, "Rotating").
                tls.spawn_watcher(rill_tls::RELOAD_POLL_INTERVAL);
                Some(tls)
            }
            InternalTls::Insecure => {
                tracing::warn!(
                    node = config.node_id,
                    "INSECURE: [tls] insecure-internal is set; node-to-node traffic is plain TCP and anyone who reaches the internal listener is trusted as a node"
                );
                None
            }
        };
        // The first failed write or sync takes the node out of replication (docs/security.md).
        let (engine, health) = rill_storage::monitor(engine);
        let syncer = Syncer::start_with_latency(engine.clone(), config.sync_latency);
        let transport = Transport::new(config.node_id, tls.clone());
        let multi = MultiRaft::new(config.node_id, engine, syncer, health, transport, config.raft);
        multi.start_background();
        let (meta_sm, meta_rx) = MetaStateMachine::new();
        // Founding members initialize the metadata group; a joining node waits to be added.
        let members: Option<BTreeMap<NodeId, BasicNode>> =
            (!config.join).then(|| config.members.iter().map(|(id, addr)| (*id, BasicNode::new(addr))).collect());
        // The metadata group's snapshot is its whole state: its log is purged behind it, as a
        // state partition's is.
        let meta_options = GroupOptions {
            snapshot_every_entries: config.state_snapshot_every_entries,
            purge_behind_snapshot: Some(config.state_log_kept_entries),
            ..GroupOptions::default()
        };
        let StartedGroup { raft: meta_raft, .. } =
            multi.start_group(META_GROUP, meta_sm, members, meta_options).await?;
        let node = Arc::new_cyclic(|me| Self {
            dead_letters: Arc::new(crate::dead_letters::NodeDeadLetters::new(me.clone())),
            config,
            multi,
            meta_raft,
            meta: meta_rx,
            replicas: RwLock::new(HashMap::new()),
            producer_ids: rill_rt::sync::Mutex::new((0, 0)),
            tls,
            compaction: rill_broker::CompactionBudget::new(rill_broker::compaction::BYTES_PER_SECOND),
            replicas_changed: watch::channel(0).0,
        });
        rill_rt::spawn(reconcile(Arc::downgrade(&node), node.meta.clone()));
        rill_rt::spawn(register_members(Arc::downgrade(&node)));
        tracing::info!(node = node.config.node_id, listen = %node.config.listen, internal_listen = %node.config.internal_listen, "node started");
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.node_id
    }

    /// A receiver that sees a change whenever a replica starts or stops on this node.
    pub fn replica_changes(&self) -> watch::Receiver<u64> {
        self.replicas_changed.subscribe()
    }

    /// Tells the watchers of [`Self::replica_changes`] the replica set changed.
    fn replicas_changed(&self) {
        self.replicas_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The node's certificates for mutual TLS between nodes; `None` with the insecure setting.
    pub fn internal_tls(&self) -> Option<&Arc<rill_tls::ReloadingTls>> {
        self.tls.as_ref()
    }

    /// The multi-raft registry.
    pub fn multi(&self) -> &Arc<MultiRaft> {
        &self.multi
    }

    /// The metadata group's Raft handle.
    pub fn meta_raft(&self) -> &Raft {
        &self.meta_raft
    }

    /// The latest metadata applied on this node.
    pub fn meta(&self) -> Arc<MetaState> {
        self.meta.borrow().clone()
    }

    /// A receiver of metadata updates.
    pub fn meta_watch(&self) -> watch::Receiver<Arc<MetaState>> {
        self.meta.clone()
    }

    /// The replica of group `group` hosted here, whatever its kind.
    pub fn replica(&self, group: GroupId) -> Option<Hosted> {
        self.replicas.read().unwrap_or_else(|p| p.into_inner()).get(&group).cloned()
    }

    /// Every replica hosted here, whatever its kind, by group id.
    pub fn replicas(&self) -> Vec<Hosted> {
        let mut all: Vec<_> = self.replicas.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        all.sort_by_key(|h| h.replica().group());
        all
    }

    /// Every `__consumer_offsets` replica hosted here (group coordinator state), by group.
    pub fn offsets_replicas(&self) -> Vec<Arc<StatePartition<OffsetsMachine>>> {
        self.replicas()
            .into_iter()
            .filter_map(|h| match h {
                Hosted::Offsets(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// Every `__transaction_state` replica hosted here (transaction coordinator state), by group.
    pub fn transactions_replicas(&self) -> Vec<Arc<StatePartition<TransactionsMachine>>> {
        self.replicas()
            .into_iter()
            .filter_map(|h| match h {
                Hosted::Transactions(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// The record partition replica of group `group` hosted here.
    pub fn partition_by_group(&self, group: GroupId) -> Option<Arc<Partition>> {
        match self.replica(group)? {
            Hosted::Records(p) => Some(p),
            _ => None,
        }
    }

    /// Every record partition replica hosted here, by group id.
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.replicas()
            .into_iter()
            .filter_map(|h| match h {
                Hosted::Records(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    /// The leader of group `group` as this node knows it: from its own replica, else from the
    /// peers' leadership reports (no request is sent).
    pub fn leader_of(&self, group: GroupId) -> Option<NodeId> {
        self.multi.leader_of(group).map(|(leader, _)| leader)
    }

    /// The leader of group `group` and the term it leads in (Kafka's leader epoch), as
    /// [`Node::leader_of`] knows them.
    pub fn leadership_of(&self, group: GroupId) -> Option<(NodeId, u64)> {
        self.multi.leader_of(group)
    }

    /// The address Kafka clients reach node `id` at (its Kafka listener), once the node has
    /// announced it; `None` for a node without one.
    pub fn kafka_addr(&self, id: NodeId) -> Option<String> {
        if id == self.id() {
            return self.config.kafka.as_ref().map(|k| k.advertise.clone());
        }
        self.meta().nodes.get(&id).map(|n| n.kafka_addr.clone()).filter(|a| !a.is_empty())
    }

    /// The partition of `kind`'s internal topic that `key` belongs to, and its Raft group; `None`
    /// until the cluster has created the topic.
    pub fn coordinator_partition(&self, kind: PartitionKind, key: &str) -> Option<(u32, GroupId)> {
        let meta = self.meta();
        let topic = meta.internal_topic(kind)?;
        let n = u32::try_from(topic.partitions.len()).ok()?;
        let partition = rill_coordinator::hash::partition_for(key, n);
        Some((partition, topic.partitions.get(partition as usize)?.group))
    }

    /// The address clients reach node `id` at, once the node has announced it.
    pub fn client_addr(&self, id: NodeId) -> Option<String> {
        if id == self.id() {
            return Some(self.config.advertise.clone());
        }
        self.meta().nodes.get(&id).map(|n| n.addr.clone()).filter(|a| !a.is_empty())
    }

    /// The address the other nodes reach node `id` at (its internal listener): from the
    /// metadata, else the configured members.
    pub fn internal_addr(&self, id: NodeId) -> Option<String> {
        if id == self.id() {
            return Some(self.config.internal_advertise.clone());
        }
        let meta = self.meta();
        let known = meta.nodes.get(&id).filter(|n| !n.internal_addr.is_empty()).map(|n| n.internal_addr.clone());
        known
            .or_else(|| self.config.members.get(&id).cloned())
            .or_else(|| meta.nodes.get(&id).map(|n| n.peer_addr().to_string()))
    }

    /// Every known node (registered, or a configured member): id → client address, empty while
    /// the node has not announced it yet.
    pub fn nodes(&self) -> BTreeMap<NodeId, String> {
        let meta = self.meta();
        let mut nodes: BTreeMap<NodeId, String> = self.config.members.keys().map(|id| (*id, String::new())).collect();
        nodes.extend(meta.nodes.values().map(|n| (n.id, n.addr.clone())));
        nodes.insert(self.id(), self.config.advertise.clone());
        nodes
    }

    /// This node as the metadata should list it.
    pub fn info(&self) -> NodeInfo {
        NodeInfo {
            id: self.id(),
            addr: self.config.advertise.clone(),
            internal_addr: self.config.internal_advertise.clone(),
            kafka_addr: self.config.kafka.as_ref().map(|k| k.advertise.clone()).unwrap_or_default(),
        }
    }

    /// A Cluster-service client for node `id`, on its internal listener.
    pub fn cluster_client(&self, id: NodeId) -> Option<ClusterClient<Channel>> {
        let addr = self.internal_addr(id)?;
        let channel = self.multi.transport().channel(id, &addr).ok()?;
        Some(ClusterClient::new(channel))
    }

    /// The voters of the metadata group (the founding members).
    pub fn meta_voters(&self) -> std::collections::BTreeSet<NodeId> {
        self.meta_raft.metrics().borrow().membership_config.membership().voter_ids().collect()
    }

    /// The metadata leader as this node knows it.
    pub fn meta_leader(&self) -> Option<NodeId> {
        self.meta_raft.metrics().borrow().current_leader
    }

    /// Proposes a metadata command: locally when this node leads group 0, else forwarded to the
    /// leader. Retries while there is no leader, up to a deadline.
    pub async fn propose_meta(&self, cmd: &MetaCommand) -> Result<MetaResult, ProposeError> {
        let body = encode_command(cmd);
        let deadline = rill_rt::now() + META_PROPOSE_TIMEOUT;
        let mut last_problem = String::from("no leader elected yet");
        loop {
            match self.propose_meta_local(body.clone()).await {
                Ok(result) => return Ok(result),
                Err(LocalPropose::Stopped) => return Err(ProposeError::ShuttingDown),
                Err(LocalPropose::Undecodable(e)) => return Err(ProposeError::Internal(e)),
                Err(LocalPropose::NotLeader(Some(leader))) if leader != self.id() => {
                    match self.forward_meta(leader, body.clone()).await {
                        Ok(Some(result)) => return Ok(result),
                        Ok(None) => last_problem = format!("node {leader} is no longer the metadata leader"),
                        Err(e) => last_problem = format!("metadata leader node {leader} unreachable: {e}"),
                    }
                }
                Err(LocalPropose::NotLeader(_)) => {}
            }
            if rill_rt::now() >= deadline {
                return Err(ProposeError::NoLeader(last_problem));
            }
            rill_rt::sleep(META_RETRY_BACKOFF).await;
        }
    }

    /// Proposes on this node's group-0 replica; fails with the leader hint when not leader.
    pub async fn propose_meta_local(&self, body: bytes::Bytes) -> Result<MetaResult, LocalPropose> {
        match self.meta_raft.client_write(Payload { units: 0, body, proposal: 0 }).await {
            Ok(resp) => decode_result(&resp.data.0).map_err(LocalPropose::Undecodable),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(LocalPropose::NotLeader(f.leader_id)),
            Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(_))) => Err(LocalPropose::NotLeader(None)),
            Err(RaftError::Fatal(_)) => Err(LocalPropose::Stopped),
        }
    }

    async fn forward_meta(
        &self,
        leader: NodeId,
        command: bytes::Bytes,
    ) -> std::result::Result<Option<MetaResult>, String> {
        let mut client = self.cluster_client(leader).ok_or_else(|| format!("no address for node {leader}"))?;
        let resp = rill_rt::timeout(
            META_PROPOSE_TIMEOUT,
            client.propose_meta(ProposeMetaRequest { command, from_node: self.id() }),
        )
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|s| s.message().to_string())?
        .into_inner();
        if resp.not_leader {
            return Ok(None);
        }
        decode_result(&resp.result).map(Some)
    }

    /// Waits until this node has applied metadata in which `pred` holds.
    pub async fn wait_for_meta(&self, timeout: Duration, pred: impl Fn(&MetaState) -> bool) -> bool {
        let mut rx = self.meta.clone();
        let wait = async {
            loop {
                if pred(&rx.borrow_and_update()) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        rill_rt::timeout(timeout, wait).await.is_ok() && pred(&self.meta())
    }

    /// A producer id no other producer has or will have: from this node's reserved block, which
    /// is refilled through the metadata group when empty.
    pub async fn next_producer_id(&self) -> Result<i64, ProposeError> {
        let mut block = self.producer_ids.lock().await;
        if block.0 >= block.1 {
            match self.propose_meta(&MetaCommand::AllocateProducerIds { count: PRODUCER_ID_BLOCK }).await? {
                MetaResult::ProducerIds { first, count } => *block = (first, first + i64::from(count)),
                other => {
                    return Err(ProposeError::Internal(format!(
                        "unexpected answer to a producer id request: {other:?}"
                    )))
                }
            }
        }
        let id = block.0;
        block.0 += 1;
        Ok(id)
    }

    /// Looks up `topic`.
    pub fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.meta().topics.get(name).cloned()
    }

    /// Stops every Raft group. Data stays on disk.
    pub async fn stop(&self) {
        self.multi.shutdown().await;
        self.replicas.write().unwrap_or_else(|p| p.into_inner()).clear();
        self.replicas_changed();
    }

    /// True when this node leads group 0.
    pub fn is_meta_leader(&self) -> bool {
        self.meta_raft.metrics().borrow().state == ServerState::Leader
    }

    /// Stops the replica of `group` hosted here (its data stays until the group is deleted).
    async fn stop_partition(&self, group: GroupId) {
        self.replicas.write().unwrap_or_else(|p| p.into_inner()).remove(&group);
        self.replicas_changed();
        self.multi.stop_group(group).await;
        tracing::info!(node = self.id(), group, "stopped partition replica");
    }

    async fn start_partition(
        &self,
        topic: &TopicMeta,
        partition: u32,
        group: GroupId,
        replicas: &[NodeId],
    ) -> Result<()> {
        let members: BTreeMap<NodeId, BasicNode> =
            replicas.iter().map(|id| (*id, BasicNode::new(self.internal_addr(*id).unwrap_or_default()))).collect();
        // The first replica is the preferred leader. On a fresh partition only it initializes
        // the group — and so stands for election — while the others wait to hear from it, so
        // leaders spread as placement intended. If it does not show up (down, or slow), the others
        // initialize too after a while and elect among themselves.
        let preferred = replicas.first() == Some(&self.id());
        let initial = preferred.then(|| members.clone());
        let records = GroupOptions { quiesce: true, ..GroupOptions::default() };
        // A state partition's snapshot is its whole state: its log is purged behind it.
        let state = GroupOptions {
            quiesce: true,
            snapshot_every_entries: self.config.state_snapshot_every_entries,
            purge_behind_snapshot: Some(self.config.state_log_kept_entries),
            ..GroupOptions::default()
        };
        let (name, config, node) = (topic.name.clone(), topic.config.clone(), self.id());
        let (hosted, raft, pristine) = match topic.kind {
            PartitionKind::Records => {
                let shared = SharedState::new();
                let started = self.multi.start_group(group, shared.state_machine(), initial, records).await?;
                let (raft, pristine) = (started.raft.clone(), started.pristine);
                let settings = rill_broker::partition::PartitionSettings {
                    purge_every: self.config.record_purge_every,
                    compaction: self.compaction.clone(),
                    producers: self.config.producer_limits,
                    dead_letters: Some(self.dead_letters.clone()),
                };
                let p = Partition::new(name, partition, node, started, shared, config, settings);
                (Hosted::Records(p), raft, pristine)
            }
            PartitionKind::ConsumerOffsets => {
                let started = self.multi.start_group(group, OffsetsMachine::new(), initial, state).await?;
                let (raft, pristine) = (started.raft.clone(), started.pristine);
                (Hosted::Offsets(StatePartition::new(name, partition, node, started, config)), raft, pristine)
            }
            PartitionKind::TransactionState => {
                let started = self.multi.start_group(group, TransactionsMachine::new(), initial, state).await?;
                let (raft, pristine) = (started.raft.clone(), started.pristine);
                (Hosted::Transactions(StatePartition::new(name, partition, node, started, config)), raft, pristine)
            }
        };
        if pristine && !preferred {
            let wait = Duration::from_millis(self.config.raft.election_max_ms * 2);
            rill_rt::spawn(async move {
                rill_rt::sleep(wait).await;
                if MultiRaft::initialize_group(&raft, members).await {
                    tracing::info!(group, "preferred leader did not start the partition; initialized it here");
                }
            });
        }
        self.replicas.write().unwrap_or_else(|p| p.into_inner()).insert(group, hosted);
        self.replicas_changed();
        tracing::info!(node = self.id(), topic = %topic.name, partition, group, kind = topic.kind.name(), "started partition replica");
        Ok(())
    }

    /// Creates the internal topics missing from the metadata (on the metadata leader, once the
    /// members are registered): `__consumer_offsets` and `__transaction_state`, with the
    /// configured partition counts and up to three replicas.
    async fn create_internal_topics(&self) -> Result<(), ProposeError> {
        let meta = self.meta();
        let replication_factor = u32::try_from(meta.nodes.len().min(3)).unwrap_or(3);
        for (kind, partitions) in [
            (PartitionKind::ConsumerOffsets, self.config.consumer_offsets_partitions),
            (PartitionKind::TransactionState, self.config.transaction_state_partitions),
        ] {
            let Some(name) = kind.internal_topic() else { continue };
            if meta.topics.contains_key(name) {
                continue;
            }
            let cmd = MetaCommand::CreateTopic {
                name: name.to_string(),
                topic_id: new_topic_id(),
                kind,
                partitions,
                replication_factor,
                configs: Vec::new(),
                live_nodes: Vec::new(),
            };
            match self.propose_meta(&cmd).await? {
                MetaResult::TopicCreated(t) => {
                    tracing::info!(topic = %t.name, partitions, replication_factor, "created internal topic")
                }
                MetaResult::Refused(e) => tracing::debug!(topic = name, error = %e, "internal topic not created"),
                other => tracing::warn!(topic = name, answer = ?other, "unexpected answer creating an internal topic"),
            }
        }
        Ok(())
    }
}

/// A fresh topic id: a random (version 4) UUID, drawn through the runtime seam so the simulation
/// replays it. Like Kafka, it is never all zeros and its base64 form never starts with `-`
/// (command lines would read it as an option).
pub fn new_topic_id() -> rill_meta::TopicId {
    use rand::RngCore;
    loop {
        let mut bytes = [0u8; 16];
        rill_rt::rng().fill_bytes(&mut bytes);
        let id = uuid::Builder::from_random_bytes(bytes).into_uuid().into_bytes();
        // Base64 puts the first six bits first; 62 is '-' in the URL-safe alphabet.
        if id != [0; 16] && id[0] >> 2 != 62 {
            return id;
        }
    }
}

/// A fresh cluster id, as Kafka writes them: a random UUID (drawn as topic ids are) in URL-safe
/// base64 without padding, 22 characters.
pub fn new_cluster_id() -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(new_topic_id())
}

/// The outcome of proposing on the local group-0 replica.
#[derive(Debug)]
pub enum LocalPropose {
    /// Not the leader; the leader if known.
    NotLeader(Option<NodeId>),
    /// The group stopped.
    Stopped,
    /// The state machine's answer could not be decoded.
    Undecodable(String),
}

/// Keeps this node's replicas in line with the metadata, on every change: stops replicas no
/// longer assigned here, removes the data of deleted topics (also when this node was down at the
/// time), starts newly assigned replicas and hands config changes to running ones.
async fn reconcile(node: std::sync::Weak<Node>, mut meta: watch::Receiver<Arc<MetaState>>) {
    let mut cleaned: std::collections::BTreeSet<GroupId> = Default::default();
    loop {
        let state = meta.borrow_and_update().clone();
        let Some(n) = node.upgrade() else { return };
        let assigned: BTreeMap<GroupId, (&TopicMeta, u32, &Vec<NodeId>)> =
            state.replicas_of(n.id()).into_iter().map(|(t, i, a)| (a.group, (t, i, &a.replicas))).collect();
        for h in n.replicas() {
            let group = h.replica().group();
            if !assigned.contains_key(&group) {
                n.stop_partition(group).await;
            }
        }
        let to_clean: Vec<GroupId> = state.deleted_groups.difference(&cleaned).copied().collect();
        for g in &to_clean {
            match rill_raft::LogStore::destroy(n.multi.engine().as_ref(), *g) {
                Ok(removed) => {
                    if removed {
                        tracing::info!(node = n.id(), group = *g, "removed the data of a deleted partition");
                    }
                    cleaned.insert(*g);
                }
                Err(e) => {
                    tracing::error!(group = *g, error = %e, "cannot remove a deleted partition's data; will retry")
                }
            }
        }
        for (group, (topic, partition, replicas)) in &assigned {
            match n.replica(*group) {
                Some(h) => {
                    if h.replica().config() != topic.config {
                        h.replica().set_config(topic.config.clone());
                    }
                }
                None => {
                    if let Err(e) = n.start_partition(topic, *partition, *group, replicas).await {
                        tracing::error!(topic = %topic.name, partition, error = %e, "failed to start partition replica");
                    }
                }
            }
        }
        drop(n);
        if meta.changed().await.is_err() {
            return;
        }
    }
}

/// Registers the node in the metadata once a leader exists: each node announces its own client
/// and internal addresses together with every founding member not registered yet, by its
/// internal address (so replicas can be placed on a member that is down); then the metadata
/// leader names the cluster (its id) and creates the internal topics. Idempotent.
async fn register_members(node: std::sync::Weak<Node>) {
    let Some(mut raft_metrics) = node.upgrade().map(|n| n.meta_raft.metrics()) else { return };
    loop {
        // Mark the current metrics as seen, so the wait below sleeps until something changes.
        raft_metrics.borrow_and_update();
        let Some(n) = node.upgrade() else { return };
        let meta = n.meta();
        let me = n.info();
        // A joining node is registered by the member that admits it (see `crate::join`).
        let announce = !n.config.join && meta.nodes.get(&me.id) != Some(&me);
        let missing: Vec<NodeInfo> = n
            .config
            .members
            .iter()
            .filter(|(id, addr)| meta.nodes.get(id).map(|i| i.peer_addr()) != Some(addr.as_str()))
            .map(|(id, addr)| NodeInfo {
                id: *id,
                addr: String::new(),
                internal_addr: addr.clone(),
                kafka_addr: String::new(),
            })
            .collect();
        let internal_missing = [PartitionKind::ConsumerOffsets, PartitionKind::TransactionState]
            .iter()
            .any(|k| k.internal_topic().is_some_and(|name| !meta.topics.contains_key(name)));
        let no_cluster_id = meta.cluster_id.is_empty();
        if !announce && missing.is_empty() && !internal_missing && !no_cluster_id {
            return;
        }
        let leader = n.is_meta_leader();
        // Every founding member in one command, whoever proposes it first, so the metadata never
        // lists some founding members and not others (placement would count too few nodes).
        let mut nodes = missing;
        if announce {
            nodes.retain(|m| m.id != me.id);
            nodes.push(me);
        }
        if !nodes.is_empty() {
            if let Err(e) = n.propose_meta(&MetaCommand::RegisterNodes { nodes }).await {
                tracing::debug!(error = %e, "registering nodes failed; will retry");
            }
        } else if leader && no_cluster_id {
            // The first leader names the cluster; the first id applied stays (data written
            // before clusters had ids gets one at its next start).
            let command = MetaCommand::SetClusterId { cluster_id: new_cluster_id() };
            if let Err(e) = n.propose_meta(&command).await {
                tracing::debug!(error = %e, "setting the cluster id failed; will retry");
            }
        } else if leader {
            if let Err(e) = n.create_internal_topics().await {
                tracing::debug!(error = %e, "creating the internal topics failed; will retry");
            }
        }
        drop(n);
        // Wake on leadership changes, and re-check now and then in any case.
        let _ = rill_rt::timeout(Duration::from_millis(500), raft_metrics.changed()).await;
    }
}
