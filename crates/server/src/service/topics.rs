//! Topics and the cluster: creating, deleting, altering, growing, listing and describing topics,
//! deleting records, describing the cluster and admitting nodes, routing metadata, and finding a
//! group's or transactional id's coordinator.

use std::time::Duration;

use futures::future::join_all;
use rill_meta::{ConfigEdits, MetaCommand, MetaResult, MetaState, PartitionKind, TopicId, TopicMeta};
use rill_proto::internal::{PingRequest, ReplicaStatus};
use rill_raft::NodeId;

use super::authz::{needs, ResourceType, CLUSTER_RESOURCE};
use super::limits::{self, SeenPartitions};
use super::routing::local_replica;
use super::status::{gather, PartitionLive};
use super::{Answer, Answers, Listener, RequestContext, RequestError, Service, TopicAnswers};
use crate::errors;

/// How long a metadata change (a topic created, a setting altered) may take to be visible here.
pub(crate) const META_WAIT: Duration = Duration::from_secs(10);
/// How long a liveness probe may take.
const PING_TIMEOUT: Duration = Duration::from_millis(500);
/// A node heard from (its pings) within this long counts as alive in `Metadata` answers.
const RECENTLY_HEARD: Duration = Duration::from_secs(1);
/// DeleteRecords' wait for each deletion to be committed when the request gives none.
const DEFAULT_DELETE_RECORDS_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest DeleteRecords wait a request may ask for.
const MAX_DELETE_RECORDS_TIMEOUT: Duration = Duration::from_secs(300);

/// A topic as `DescribeTopic` (and the calls that change a topic) answer it: its layout,
/// settings and what its partitions' leaders report now.
#[derive(Debug, Clone)]
pub struct TopicDescription {
    /// Its name.
    pub name: String,
    /// Its id.
    pub topic_id: TopicId,
    /// What its partitions hold.
    pub kind: PartitionKind,
    /// Each partition, by number.
    pub partitions: Vec<PartitionDescription>,
    /// Its settings, every key with its value.
    pub configs: Vec<(String, String)>,
}

/// One partition as described.
#[derive(Debug, Clone)]
pub struct PartitionDescription {
    /// Its number.
    pub partition: u32,
    /// Its replicas, the preferred leader first.
    pub replicas: Vec<NodeId>,
    /// What its leader reports (leader, in-sync replicas, offsets), or why none can be heard.
    pub leader: Answer<ReplicaStatus>,
}

/// A topic as `ListTopics` shows it.
#[derive(Debug, Clone)]
pub struct TopicSummary {
    /// Its name.
    pub name: String,
    /// Its id.
    pub topic_id: TopicId,
    /// True for an internal topic.
    pub internal: bool,
    /// How many partitions it has.
    pub partitions: u32,
    /// How many replicas each has.
    pub replication_factor: u32,
}

/// A node of the cluster, as `DescribeCluster` and `Metadata` show it.
#[derive(Debug, Clone)]
pub struct NodeDescription {
    /// Its id.
    pub node_id: NodeId,
    /// Its client address (empty while it has not announced it).
    pub address: String,
    /// Its Kafka listener's address (empty when it has none, or has not announced it).
    pub kafka_address: String,
    /// Whether it answered (or was heard from) just now.
    pub alive: bool,
    /// Whether it votes in the metadata group.
    pub metadata_voter: bool,
    /// Why its storage failed, when it says so.
    pub storage_failure: String,
}

/// Where a topic's partitions live, as `Metadata` answers it.
#[derive(Debug, Clone)]
pub struct TopicLayout {
    /// Its id.
    pub topic_id: TopicId,
    /// True for an internal topic.
    pub internal: bool,
    /// Each partition, in order.
    pub partitions: Vec<PartitionLayout>,
}

/// Where one partition lives, as this node knows it without asking others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLayout {
    /// Its number.
    pub partition: u32,
    /// Its leader and the Raft term it leads in (Kafka's leader epoch); `None` while this node
    /// knows of no leader.
    pub leader: Option<(NodeId, u64)>,
    /// Its replicas, the preferred leader first.
    pub replicas: Vec<NodeId>,
    /// The replicas in sync with the leader, as the leader counts them: known only when this
    /// node leads the partition.
    pub in_sync: Option<Vec<NodeId>>,
}

/// What `Metadata` answers: the reachable nodes, and each topic's layout or why not.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// The cluster's id (empty until the first metadata leader has set it).
    pub cluster_id: String,
    /// The node leading the cluster metadata, as this node knows it (Kafka's controller).
    pub controller: Option<NodeId>,
    /// Every node a client can reach.
    pub nodes: Vec<NodeDescription>,
    /// Each topic, in the order named (or every topic the caller may describe).
    pub topics: Vec<(String, Answer<TopicLayout>)>,
}

/// One setting of a topic, as `DescribeConfigs` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSetting {
    /// Its key (`retention.ms`, ...).
    pub key: String,
    /// Its value.
    pub value: String,
    /// True when it is the default for the topic.
    pub default: bool,
}

/// A coordinator, as `FindCoordinator` answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    /// The node that leads the key's partition.
    pub node_id: NodeId,
    /// Its address on the listener the request came by (a gRPC client reaches it at its client
    /// address, a Kafka client at its Kafka address).
    pub address: String,
    /// The partition of the internal topic the key hashes to.
    pub partition: u32,
}

/// One topic's partitions whose records to delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteRecordsTopic {
    /// The topic.
    pub topic: String,
    /// The topic's id, when the client names it.
    pub topic_id: bytes::Bytes,
    /// Each partition, with the offset below which its records go.
    pub partitions: Vec<(u32, i64)>,
}

/// Most unknown topics one `Metadata` request may create ([`Service::auto_create_topics`]).
pub const MAX_AUTO_CREATED: usize = 100;

/// A `CreateTopic` request.
#[derive(Debug, Clone, Default)]
pub struct CreateTopic {
    /// The name.
    pub name: String,
    /// How many partitions.
    pub partitions: u32,
    /// How many replicas each.
    pub replication_factor: u32,
    /// Settings other than the defaults.
    pub configs: Vec<(String, String)>,
}

/// `settings` without those Rill takes but does not store (`rill_meta::config::inert_setting`:
/// Kafka's `segment.bytes`, `message.timestamp.type=CreateTime`, …), each checked; the
/// metadata log never sees them.
fn without_inert_settings(settings: Vec<(String, String)>) -> Answer<Vec<(String, String)>> {
    let mut kept = Vec::with_capacity(settings.len());
    for (key, value) in settings {
        match rill_meta::config::inert_setting(&key, Some(&value)) {
            None => kept.push((key, value)),
            Some(Ok(())) => tracing::debug!(key, value, "took a Kafka setting Rill does not store"),
            Some(Err(e)) => return Err(errors::meta(&e)),
        }
    }
    Ok(kept)
}

/// `edits` without the settings Rill does not store (each checked: a bad value of one is still
/// refused).
fn without_inert_edits(edits: ConfigEdits) -> Answer<ConfigEdits> {
    Ok(ConfigEdits {
        set: without_inert_settings(edits.set)?,
        reset: without_inert_resets(edits.reset)?,
        append: without_inert_settings(edits.append)?,
        subtract: without_inert_settings(edits.subtract)?,
    })
}

/// `keys` to reset without those Rill does not store (resetting one changes nothing).
fn without_inert_resets(keys: Vec<String>) -> Answer<Vec<String>> {
    let mut kept = Vec::with_capacity(keys.len());
    for key in keys {
        match rill_meta::config::inert_setting(&key, None) {
            None => kept.push(key),
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(errors::meta(&e)),
        }
    }
    Ok(kept)
}

/// Largest replication factor a topic created without one gets: every acknowledged write
/// survives a node's loss once three nodes hold it.
pub const MAX_DEFAULT_REPLICATION_FACTOR: u32 = 3;

impl Service {
    /// The partitions of a topic a Kafka client creates without a count (`[kafka]
    /// default-partitions`, Kafka's `num.partitions`).
    pub fn default_partitions(&self) -> u32 {
        self.node.config().kafka.as_ref().map_or(crate::config::DEFAULT_KAFKA_PARTITIONS, |k| k.default_partitions)
    }

    /// The version of the cluster's metadata as this node has applied it: it only grows, so it
    /// orders what different nodes report (Kafka's features epoch, its metadata offset).
    pub fn metadata_version(&self) -> u64 {
        self.node.meta().version
    }

    /// The replication factor of a topic created without one: three, or every registered node in a
    /// smaller cluster.
    pub fn default_replication_factor(&self) -> u32 {
        let nodes = u32::try_from(self.node.meta().nodes.len()).unwrap_or(u32::MAX);
        nodes.clamp(1, MAX_DEFAULT_REPLICATION_FACTOR)
    }

    /// Checks a topic creation (Create on it) against what this node sees, without creating it
    /// (Kafka's `validate_only`); the nodes alive now, for the creation.
    pub async fn validate_create_topic(&self, ctx: &RequestContext, req: &CreateTopic) -> Answer<Vec<u64>> {
        self.authorize(ctx, ResourceType::Topic, &req.name)?;
        let configs = without_inert_settings(req.configs.clone())?;
        // The members register themselves right after the first election.
        if !self.node.wait_for_meta(META_WAIT, |m: &MetaState| !m.nodes.is_empty()).await {
            return Err(errors::metadata_not_ready());
        }
        // Fail fast on what this node can already see; the leader checks again when applying.
        let live_nodes = self.live_nodes().await;
        self.node
            .meta()
            .check_create(&req.name, req.partitions, req.replication_factor, &configs, &live_nodes)
            .and_then(|c| c.check_request_bounds())
            .map_err(|e| errors::meta(&e))?;
        Ok(live_nodes)
    }

    /// Creates a record topic (Create on it) and answers it described, once this node sees it.
    pub async fn create_topic(&self, ctx: &RequestContext, req: CreateTopic) -> Answer<TopicDescription> {
        let live_nodes = self.validate_create_topic(ctx, &req).await?;
        let cmd = MetaCommand::CreateTopic {
            live_nodes,
            topic_id: crate::node::new_topic_id(),
            kind: PartitionKind::Records,
            name: req.name,
            partitions: req.partitions,
            replication_factor: req.replication_factor,
            configs: without_inert_settings(req.configs)?,
        };
        let topic = match self.node.propose_meta(&cmd).await {
            Err(e) => return Err(errors::propose(&e)),
            Ok(MetaResult::Refused(e)) => return Err(errors::meta(&e)),
            Ok(MetaResult::TopicCreated(t)) => t,
            Ok(other) => return Err(errors::unexpected_meta_answer(&other)),
        };
        // Visible on this node before answering, so a follow-up request here sees it.
        let name = topic.name.clone();
        self.node.wait_for_meta(META_WAIT, |m| m.topics.contains_key(&name)).await;
        Ok(self.describe(&topic).await)
    }

    /// Kafka's topic auto-creation, a side effect of `Metadata`: creates each of `names` no topic
    /// has, with the defaults ([`Service::default_partitions`], the default replication
    /// factor, no settings), when this node's Kafka listener allows it (`[kafka]
    /// auto-create-topics`) and the caller may create that topic (Create on it, whatever the
    /// asking request's own rule needs). A name that cannot be a topic, a creation refused, or
    /// a name beyond the first [`MAX_AUTO_CREATED`] unknown ones is left alone: the metadata then
    /// answers that topic as unknown. Answers the names created.
    pub async fn auto_create_topics(&self, ctx: &RequestContext, names: &[String]) -> Vec<String> {
        if !self.node.config().kafka.as_ref().is_some_and(|k| k.auto_create_topics) {
            return Vec::new();
        }
        let unknown: Vec<&String> = {
            let meta = self.node.meta();
            names.iter().filter(|n| !meta.topics.contains_key(n.as_str())).take(MAX_AUTO_CREATED).collect()
        };
        let creating = RequestContext { needs: needs::CREATE_TOPICS, ..ctx.clone() };
        let mut created = Vec::new();
        for name in unknown {
            let req = CreateTopic {
                name: name.clone(),
                partitions: self.default_partitions(),
                replication_factor: self.default_replication_factor(),
                configs: Vec::new(),
            };
            match self.create_topic(&creating, req).await {
                Ok(_) => created.push(name.clone()),
                Err(refusal) => tracing::debug!(topic = %name, %refusal.message, "not auto-created"),
            }
        }
        created
    }

    /// Deletes a topic (Delete on it), answered once this node no longer sees it.
    pub async fn delete_topic(&self, ctx: &RequestContext, name: String) -> Answer<()> {
        self.authorize(ctx, ResourceType::Topic, &name)?;
        if self.node.topic(&name).is_none() {
            return Err(errors::unknown_topic(&name));
        }
        let n = name.clone();
        self.change_topic(MetaCommand::DeleteTopic { name }, move |m| !m.topics.contains_key(&n)).await.map(|_| ())
    }

    /// A topic's settings (DescribeConfigs on it), every key with its value and whether it is
    /// the default for the topic's replication factor, without asking the replicas anything.
    pub fn topic_settings(&self, ctx: &RequestContext, name: &str) -> Answer<Vec<TopicSetting>> {
        self.authorize(ctx, ResourceType::Topic, name)?;
        let topic = self.node.topic(name).ok_or_else(|| errors::unknown_topic(name))?;
        let defaults = rill_meta::TopicConfig::defaults(topic.replication_factor).entries();
        Ok(topic
            .config
            .entries()
            .into_iter()
            .map(|(key, value)| {
                let default = defaults.iter().any(|(k, v)| *k == key && *v == value);
                TopicSetting { key, value, default }
            })
            .collect())
    }

    /// Checks changing a topic's settings (AlterConfigs on it) without changing them (Kafka's
    /// `validate_only`).
    pub fn validate_alter_topic_config(&self, ctx: &RequestContext, name: &str, edits: ConfigEdits) -> Answer<()> {
        self.authorize(ctx, ResourceType::Topic, name)?;
        let edits = without_inert_edits(edits)?;
        let checked = self.node.meta().check_alter_config(name, &edits);
        checked.and_then(|c| c.check_request_bounds()).map(|_| ()).map_err(|e| errors::meta(&e))
    }

    /// Changes settings of a topic (AlterConfigs on it): keys set, reset to their defaults, or
    /// (`cleanup.policy`) items appended or subtracted — those resolved against the settings
    /// when the change applies. Answers the topic described once this node has applied it.
    pub async fn alter_topic_config(
        &self,
        ctx: &RequestContext,
        name: String,
        edits: ConfigEdits,
    ) -> Answer<TopicDescription> {
        self.authorize(ctx, ResourceType::Topic, &name)?;
        let edits = without_inert_edits(edits)?;
        let checked = self.node.meta().check_alter_config(&name, &edits);
        checked.and_then(|c| c.check_request_bounds()).map_err(|e| errors::meta(&e))?;
        let topic_name = name.clone();
        let topic = match self.node.propose_meta(&MetaCommand::AlterTopicConfig { name, edits }).await {
            Err(e) => return Err(errors::propose(&e)),
            Ok(MetaResult::Refused(e)) => return Err(errors::meta(&e)),
            Ok(MetaResult::TopicUpdated(t)) => t,
            Ok(MetaResult::TopicDeleted(_)) => return Err(errors::topic_vanished(&topic_name, "being altered")),
            Ok(other) => return Err(errors::unexpected_meta_answer(&other)),
        };
        // Visible on this node before answering, with the settings the change applied (list
        // edits resolve when it applies, so they are known only from its result).
        let config = topic.config.clone();
        self.node.wait_for_meta(META_WAIT, |m| m.topics.get(&topic_name).is_some_and(|t| t.config == config)).await;
        Ok(self.describe(&topic).await)
    }

    /// Replaces a topic's settings by `set` (Kafka's legacy `AlterConfigs`; AlterConfigs on it):
    /// every setting not named returns to its default — so a client naming one setting of a
    /// compacted topic makes it a deleting one again, as in Kafka. With `validate_only`, checks
    /// without changing.
    pub async fn replace_topic_config(
        &self,
        ctx: &RequestContext,
        name: String,
        set: Vec<(String, String)>,
        validate_only: bool,
    ) -> Answer<()> {
        let named = |key: &str| set.iter().any(|(k, _)| k == key);
        let reset: Vec<String> =
            rill_meta::config::KEYS.iter().filter(|k| !named(k)).map(|k| (*k).to_string()).collect();
        let edits = ConfigEdits::new(set, reset);
        if validate_only {
            return self.validate_alter_topic_config(ctx, &name, edits);
        }
        self.alter_topic_config(ctx, name, edits).await.map(|_| ())
    }

    /// Checks growing a topic to `total` partitions (Alter on it) without growing it (Kafka's
    /// `validate_only`); the nodes alive now, for the change.
    pub async fn validate_create_partitions(&self, ctx: &RequestContext, name: &str, total: u32) -> Answer<Vec<u64>> {
        self.authorize(ctx, ResourceType::Topic, name)?;
        let live_nodes = self.live_nodes().await;
        self.node.meta().check_create_partitions(name, total, &live_nodes).map_err(|e| errors::meta(&e))?;
        Ok(live_nodes)
    }

    /// Grows a topic to `total` partitions (Alter on it); answers it described once this node
    /// has applied the change.
    pub async fn create_partitions(&self, ctx: &RequestContext, name: String, total: u32) -> Answer<TopicDescription> {
        let live_nodes = self.validate_create_partitions(ctx, &name, total).await?;
        let (topic_name, wanted) = (name.clone(), total as usize);
        let visible = {
            let name = name.clone();
            move |m: &MetaState| m.topics.get(&name).is_some_and(|t| t.partitions.len() >= wanted)
        };
        match self.change_topic(MetaCommand::CreatePartitions { name, total, live_nodes }, visible).await? {
            Some(t) => Ok(self.describe(&t).await),
            None => Err(errors::topic_vanished(&topic_name, "growing")),
        }
    }

    /// Every topic the caller may describe (internal ones only with `include_internal`).
    pub fn list_topics(&self, ctx: &RequestContext, include_internal: bool) -> Vec<TopicSummary> {
        self.node
            .meta()
            .topics
            .values()
            .filter(|t| include_internal || !t.is_internal())
            .filter(|t| self.lists(ctx, ResourceType::Topic, &t.name))
            .map(|t| TopicSummary {
                name: t.name.clone(),
                topic_id: t.topic_id,
                internal: t.is_internal(),
                partitions: t.partitions.len() as u32,
                replication_factor: t.replication_factor,
            })
            .collect()
    }

    /// A topic described (Describe and DescribeConfigs on it), with what each partition's
    /// leader reports now.
    pub async fn describe_topic(&self, ctx: &RequestContext, name: &str) -> Answer<TopicDescription> {
        self.authorize(ctx, ResourceType::Topic, name)?;
        let topic = self.node.topic(name).ok_or_else(|| errors::unknown_topic(name))?;
        Ok(self.describe(&topic).await)
    }

    /// Every known node, each probed now (Describe on the cluster), and the metadata leader.
    pub async fn describe_cluster(
        &self,
        ctx: &RequestContext,
    ) -> Result<(Vec<NodeDescription>, Option<NodeId>), RequestError> {
        self.authorize_request(ctx, ResourceType::Cluster, CLUSTER_RESOURCE)?;
        Ok((self.probe_nodes().await, self.node.meta_leader()))
    }

    /// Routing metadata: the nodes a client can reach and each topic's partitions with their
    /// leaders, answered from what this node knows (its replicas, the peers' leadership reports,
    /// the pings) without asking other nodes, so clients may ask as often as they like. Named
    /// topics are answered each on its own (a repeated name once; an internal topic only when
    /// named; none when the list is empty); `None`, every client topic the caller may describe.
    pub fn metadata(&self, ctx: &RequestContext, topics: Option<Vec<String>>) -> Result<Metadata, RequestError> {
        limits::check_counts("Metadata", topics.as_ref().map_or(0, Vec::len), 0)?;
        // A node whose storage failed knows no current leaders (it left every group): clients
        // are sent to another node, as to one that is down.
        if let Some(reason) = self.node.multi().storage_failure() {
            return Err(RequestError::StorageFailed { node: self.node.id(), reason });
        }
        let meta = self.node.meta();
        let names: Vec<String> = match topics {
            None => meta
                .topics
                .values()
                .filter(|t| !t.is_internal())
                .filter(|t| self.lists(ctx, ResourceType::Topic, &t.name))
                .map(|t| t.name.clone())
                .collect(),
            Some(named) => limits::distinct(named),
        };
        let topics = names
            .into_iter()
            .map(|name| {
                let layout = self.authorize(ctx, ResourceType::Topic, &name).and_then(|()| {
                    // A name no topic could have is INVALID_TOPIC, which clients do not wait
                    // out as they wait for a topic still being created.
                    rill_meta::state::validate_topic_name(&name).map_err(|e| errors::meta(&e))?;
                    let t = meta.topics.get(&name).ok_or_else(|| errors::unknown_topic(&name))?;
                    Ok(TopicLayout {
                        topic_id: t.topic_id,
                        internal: t.is_internal(),
                        partitions: t
                            .partitions
                            .iter()
                            .enumerate()
                            .map(|(i, p)| self.partition_layout(i as u32, p))
                            .collect(),
                    })
                });
                (name, layout)
            })
            .collect();
        Ok(Metadata {
            cluster_id: meta.cluster_id.clone(),
            controller: self.node.meta_leader(),
            nodes: self.known_nodes(),
            topics,
        })
    }

    /// Where partition `partition` (assigned as `assignment`) lives, as this node knows it: its
    /// leader and term from its own replica or the peers' reports, its in-sync replicas when
    /// this node leads it.
    fn partition_layout(&self, partition: u32, assignment: &rill_meta::PartitionAssignment) -> PartitionLayout {
        let leader = self.node.leadership_of(assignment.group);
        let in_sync = match leader {
            Some((id, _)) if id == self.node.id() => {
                self.node.replica(assignment.group).map(|hosted| hosted.state().isr).filter(|isr| !isr.is_empty())
            }
            _ => None,
        };
        PartitionLayout { partition, leader, replicas: assignment.replicas.clone(), in_sync }
    }

    /// Admits node `id` to join the cluster, or revokes its admission (Alter on the cluster);
    /// answered once this node sees the change.
    pub async fn admit_node(&self, ctx: &RequestContext, id: NodeId, revoke: bool) -> Answer<()> {
        self.authorize(ctx, ResourceType::Cluster, CLUSTER_RESOURCE)?;
        if id == 0 {
            return Err(errors::invalid_request("node ids start at 1"));
        }
        match self.node.propose_meta(&MetaCommand::AdmitNode { id, revoke }).await {
            Err(e) => return Err(errors::propose(&e)),
            Ok(MetaResult::AdmissionChanged) => {}
            Ok(MetaResult::Refused(e)) => return Err(errors::meta(&e)),
            Ok(other) => return Err(errors::unexpected_meta_answer(&other)),
        }
        // Visible here before answering (a registered node needs no admission).
        self.node.wait_for_meta(META_WAIT, |m| m.admitted.contains(&id) != revoke || m.nodes.contains_key(&id)).await;
        Ok(())
    }

    /// Deletes the records of each partition below its offset, on its leader here (Delete on
    /// each topic), waiting up to `timeout_ms` (0: 30 s; at most 300 s) for each deletion to be
    /// committed; answers each partition's new log start offset.
    pub async fn delete_records(
        &self,
        ctx: &RequestContext,
        timeout_ms: u32,
        topics: Vec<DeleteRecordsTopic>,
    ) -> Result<Answers<u64>, RequestError> {
        limits::check_counts("DeleteRecords", topics.len(), topics.iter().map(|t| t.partitions.len()).sum())?;
        let timeout = match timeout_ms {
            0 => DEFAULT_DELETE_RECORDS_TIMEOUT,
            ms => Duration::from_millis(u64::from(ms)).min(MAX_DELETE_RECORDS_TIMEOUT),
        };
        let mut seen = SeenPartitions::default();
        let topics = topics.into_iter().map(|DeleteRecordsTopic { topic, topic_id, partitions }| {
            let denied = self.authorize(ctx, ResourceType::Topic, &topic).err();
            let firsts: Vec<bool> = partitions.iter().map(|(p, _)| seen.first(&topic, *p)).collect();
            async move {
                let parts = partitions.iter().zip(firsts).map(|(&(partition, offset), first)| {
                    let (topic, topic_id, denied) = (&topic, &topic_id, &denied);
                    async move {
                        let answer = match denied {
                            Some(e) => Err(e.clone()),
                            None if !first => Err(errors::duplicate_partition(topic, partition)),
                            None => self.delete_records_one(topic, topic_id, partition, offset, timeout).await,
                        };
                        (partition, answer)
                    }
                });
                let partitions = join_all(parts).await;
                TopicAnswers { topic: topic.clone(), partitions }
            }
        });
        Ok(join_all(topics).await)
    }

    async fn delete_records_one(
        &self,
        topic: &str,
        topic_id: &[u8],
        partition: u32,
        offset: i64,
        timeout: Duration,
    ) -> Answer<u64> {
        let replica = local_replica(&self.node, topic, topic_id, partition)?;
        let deleted = replica.delete_records(offset, rill_rt::now() + timeout).await;
        deleted.map_err(|e| errors::partition(&e, |id| self.node.client_addr(id)))
    }

    /// The coordinator of `key` — a group id (`kind` [`PartitionKind::ConsumerOffsets`], needs
    /// Describe on the group) or a transactional id (Describe on it): the leader of the internal
    /// topic's partition the key hashes to, at its address on the request's listener (a leader
    /// without one answers as if there were no leader: the client asks again).
    pub fn find_coordinator(&self, ctx: &RequestContext, kind: PartitionKind, key: &str) -> Answer<Coordinator> {
        let resource = match kind {
            PartitionKind::ConsumerOffsets => ResourceType::Group,
            _ => ResourceType::TransactionalId,
        };
        self.authorize(ctx, resource, key)?;
        super::checks::coordinator_key(kind, key)?;
        let topic = kind.internal_topic().unwrap_or_default();
        let (partition, group) =
            self.node.coordinator_partition(kind, key).ok_or_else(|| errors::coordinator_not_created(topic))?;
        let address = |id| match ctx.listener {
            Listener::Kafka => self.node.kafka_addr(id),
            _ => self.node.client_addr(id),
        };
        match self.node.leader_of(group).and_then(|l| address(l).map(|a| (l, a))) {
            None => Err(errors::coordinator_without_leader(topic, partition)),
            Some((node_id, address)) => Ok(Coordinator { node_id, address, partition }),
        }
    }

    /// `topic` described, with a fresh report from each partition's replicas.
    async fn describe(&self, topic: &TopicMeta) -> TopicDescription {
        let live = gather(&self.node, &[topic]).await;
        let partitions = topic
            .partitions
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let l = live.get(&p.group).cloned().unwrap_or_default();
                describe_partition(&topic.name, i as u32, &p.replicas, l)
            })
            .collect();
        TopicDescription {
            name: topic.name.clone(),
            topic_id: topic.topic_id,
            kind: topic.kind,
            partitions,
            configs: topic.config.entries(),
        }
    }

    /// Proposes a change to an existing topic and waits until this node has applied it.
    /// `visible` tells, from the applied metadata, that the change is visible here.
    async fn change_topic(&self, cmd: MetaCommand, visible: impl Fn(&MetaState) -> bool) -> Answer<Option<TopicMeta>> {
        let topic = match self.node.propose_meta(&cmd).await {
            Err(e) => return Err(errors::propose(&e)),
            Ok(MetaResult::Refused(e)) => return Err(errors::meta(&e)),
            Ok(MetaResult::TopicDeleted(_)) => None,
            Ok(MetaResult::TopicUpdated(t)) | Ok(MetaResult::TopicCreated(t)) => Some(t),
            Ok(other) => return Err(errors::unexpected_meta_answer(&other)),
        };
        self.node.wait_for_meta(META_WAIT, visible).await;
        Ok(topic)
    }

    /// Every known node with a fresh liveness probe (a node that has not announced its client
    /// address yet is listed with an empty one).
    async fn probe_nodes(&self) -> Vec<NodeDescription> {
        let nodes = self.node.nodes();
        let voters = self.node.meta_voters();
        let probes = nodes.iter().map(|(id, addr)| {
            let metadata_voter = voters.contains(id);
            async move {
                let (alive, storage_failure) = self.alive(*id).await;
                NodeDescription {
                    node_id: *id,
                    address: addr.clone(),
                    kafka_address: self.node.kafka_addr(*id).unwrap_or_default(),
                    alive,
                    metadata_voter,
                    storage_failure,
                }
            }
        });
        join_all(probes).await
    }

    /// Every node a client can reach (its client address is known), alive when this node heard
    /// from it within the last second (the node-level pings): no request is sent.
    fn known_nodes(&self) -> Vec<NodeDescription> {
        let voters = self.node.meta_voters();
        let liveness = self.node.multi().transport().liveness();
        self.node
            .nodes()
            .into_iter()
            .filter(|(_, address)| !address.is_empty())
            .map(|(id, address)| {
                let storage_failure = if id == self.node.id() {
                    self.node.multi().storage_failure().unwrap_or_default()
                } else {
                    String::new()
                };
                NodeDescription {
                    node_id: id,
                    address,
                    kafka_address: self.node.kafka_addr(id).unwrap_or_default(),
                    alive: (id == self.node.id() && storage_failure.is_empty())
                        || liveness.silent_for(id) < RECENTLY_HEARD,
                    metadata_voter: voters.contains(&id),
                    storage_failure,
                }
            })
            .collect()
    }

    /// Ids of the nodes that answer a probe now.
    async fn live_nodes(&self) -> Vec<u64> {
        self.probe_nodes().await.into_iter().filter(|n| n.alive).map(|n| n.node_id).collect()
    }

    /// Whether node `id` answers a ping now, and why its storage failed if it says so (a node
    /// whose storage failed answers pings with the reason: see `errors::storage_failed_status`).
    async fn alive(&self, id: u64) -> (bool, String) {
        if id == self.node.id() {
            let failure = self.node.multi().storage_failure();
            return (failure.is_none(), failure.unwrap_or_default());
        }
        let Some(mut client) = self.node.cluster_client(id) else {
            return (false, String::new());
        };
        match rill_rt::timeout(PING_TIMEOUT, client.ping(PingRequest { from_node: self.node.id() })).await {
            Ok(Ok(_)) => (true, String::new()),
            Ok(Err(status)) if errors::is_storage_failed_status(&status) => (false, status.message().to_string()),
            _ => (false, String::new()),
        }
    }
}

/// One partition described from its replicas' reports: the leader's, or why there is none.
fn describe_partition(topic: &str, partition: u32, replicas: &[u64], live: PartitionLive) -> PartitionDescription {
    let leader =
        live.leader.ok_or_else(|| errors::no_leader_heard(topic, partition, &live.unreachable, replicas.len()));
    PartitionDescription { partition, replicas: replicas.to_vec(), leader }
}
