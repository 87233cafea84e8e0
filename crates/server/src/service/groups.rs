//! Consumer groups: membership (KIP-848 heartbeats, held as long polls), committed offsets
//! (plainly, or inside a transaction), descriptions, listings and deletions, served by each
//! group's coordinator — the leader of the `__consumer_offsets` partition the group id hashes to.

use std::collections::BTreeSet;
use std::time::Duration;

use rill_coordinator::groups::classic::ClassicDescription;
use rill_coordinator::groups::TopicPartitions;
use rill_coordinator::groups::{self as consumer_groups, HeartbeatAnswer, HeartbeatRequest, SubscribedTopic};
use rill_coordinator::offsets::txn as txn_offsets;
use rill_coordinator::offsets::{self, CommittedOffset, Committer};
use rill_coordinator::{transactions, CoordinatorError, OffsetsMachine};

use super::authz::ResourceType;
use super::checks::{self, CommitTopic, NamedPartitions};
use super::limits;
use super::routing::group_coordinator;
use super::{Answer, Answers, RequestContext, RequestError, Service, TopicAnswers};
use crate::coordinators::{GroupShard, Shard};
use crate::errors;

/// How long a commit may take to be committed by the coordinator's partition.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a coordinator may take to confirm with a quorum that it still leads before it
/// answers a read of committed offsets.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a membership change may take to be committed: well within a member's session.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// One group as `ListGroups` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Its id.
    pub group_id: String,
    /// `consumer` (KIP-848 members), `classic` (members joining generations), or `simple`
    /// (committed offsets only).
    pub protocol: String,
    /// The members' protocol type: `consumer` for KIP-848 groups, what a classic group's
    /// members sent (`consumer`, `connect`, ...), empty for a simple group.
    pub protocol_type: String,
    /// Its state's name.
    pub state: String,
    /// How many members it has.
    pub members: u32,
}

/// One member as `DescribeGroup` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Its id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// Its client's `client.id`.
    pub client_id: String,
    /// Where its client connected from.
    pub client_host: String,
    /// The topics it subscribes to by name.
    pub subscribed_topics: Vec<String>,
    /// Its subscription pattern, when it has one.
    pub subscribed_topic_regex: Option<String>,
    /// Its epoch.
    pub member_epoch: i32,
    /// Its state's name (`away` while a static member is gone within its session).
    pub state: String,
    /// What it owns now.
    pub assignment: TopicPartitions,
    /// What it is giving up.
    pub revoking: TopicPartitions,
    /// What the target assignment gives it.
    pub target: TopicPartitions,
}

/// A group as `DescribeGroup` answers it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupDescription {
    /// Its id.
    pub group_id: String,
    /// `consumer` or `simple` (as listed).
    pub protocol: String,
    /// Its state's name.
    pub state: String,
    /// The server-side assignor (KIP-848 groups).
    pub assignor: String,
    /// The rebalance mode (KIP-848 groups).
    pub rebalance_mode: String,
    /// The group epoch.
    pub group_epoch: i32,
    /// The target assignment's epoch.
    pub target_epoch: i32,
    /// Its members.
    pub members: Vec<MemberDescription>,
    /// Its committed offsets, by topic (only while each topic has the id it had at commit).
    pub offsets: Vec<TopicAnswers<Option<CommittedOffset>>>,
    /// A classic group's generation, protocol and members.
    pub classic: Option<ClassicDescription>,
}

/// A member's heartbeat.
#[derive(Debug, Clone)]
pub struct ConsumerHeartbeat {
    /// What the member says; its `client_id` and `client_host` are taken from the request's
    /// context.
    pub request: HeartbeatRequest,
    /// How long a heartbeat that changes nothing may be held (a long poll); `None` or 0 answers
    /// at once.
    pub wait_ms: Option<u32>,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatOutcome {
    /// The coordinator's answer.
    pub answer: HeartbeatAnswer,
    /// The session timeout the member is held to.
    pub session_timeout_ms: u32,
}

/// A commit inside a transaction (Kafka's `TxnOffsetCommit`).
#[derive(Debug, Clone, Default)]
pub struct TxnCommit {
    /// The producer's transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its epoch, as the wire carries it (checked to fit 16 bits).
    pub producer_epoch: i32,
    /// The transaction protocol's version number (v2: the group joins the transaction here).
    pub transaction_version: u32,
    /// The group.
    pub group_id: String,
    /// The committing member (empty for none).
    pub member_id: String,
    /// Its generation (member epoch); -1 without a member.
    pub generation_id: i32,
    /// The offsets.
    pub topics: Vec<CommitTopic>,
}

impl Service {
    /// Every group of every coordinator partition this node leads that the caller may describe
    /// (the client asks every leader), sorted by id.
    pub fn list_groups(&self, ctx: &RequestContext) -> Vec<GroupListing> {
        let mut groups = Vec::new();
        // Only a caught-up leader answers for its partition: its shard.
        for shard in self.coordinators.groups().all() {
            let classic: BTreeSet<String> = shard.classic().group_ids().unwrap_or_default().into_iter().collect();
            let Ok(listed) = shard.partition().read(|m| {
                let ids: BTreeSet<&String> =
                    m.state().group_ids().chain(m.groups().iter().map(|g| &g.group_id)).chain(classic.iter()).collect();
                ids.into_iter().map(|id| listing(m, id)).collect::<Vec<_>>()
            }) else {
                continue;
            };
            for mut g in listed.into_iter().filter(|g| self.lists(ctx, ResourceType::Group, &g.group_id)) {
                if classic.contains(&g.group_id) {
                    if let Ok(Some(d)) = shard.classic().describe(&g.group_id) {
                        g = classic_listing(&d);
                    }
                }
                groups.push(g);
            }
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        groups
    }

    /// Deletes a group without members, with its offsets (Delete on it).
    pub async fn delete_group(&self, ctx: &RequestContext, group_id: &str) -> Answer<()> {
        self.authorize(ctx, ResourceType::Group, group_id)?;
        let coordinator = group_coordinator(&self.node, group_id)?;
        let shard = self.coordinators.groups().of(&coordinator)?;
        if shard.classic().has_members(group_id) {
            // Members in the leader's memory only (a first generation not stored yet).
            let members = shard.classic().describe(group_id).ok().flatten().map_or(1, |d| d.members.len());
            let e = CoordinatorError::GroupNotEmpty { group_id: group_id.to_string(), members };
            return Err(errors::coordinator(&e));
        }
        offsets::delete_group(&coordinator, group_id, COMMIT_TIMEOUT).await.map_err(|e| errors::coordinator(&e))
    }

    /// Deletes some committed offsets of a group (Delete on it, Read on each topic).
    pub async fn delete_offsets(
        &self,
        ctx: &RequestContext,
        group_id: &str,
        topics: Vec<NamedPartitions>,
    ) -> Result<Answer<()>, RequestError> {
        limits::check_counts("DeleteOffsets", topics.len(), topics.iter().map(|t| t.partitions.len()).sum())?;
        Ok(self.delete_offsets_checked(ctx, group_id, topics).await)
    }

    async fn delete_offsets_checked(
        &self,
        ctx: &RequestContext,
        group_id: &str,
        topics: Vec<NamedPartitions>,
    ) -> Answer<()> {
        self.authorize(ctx, ResourceType::Group, group_id)?;
        for t in &topics {
            self.authorize(ctx, ResourceType::Topic, &t.topic)?;
        }
        let coordinator = group_coordinator(&self.node, group_id)?;
        let partitions: Vec<(String, u32)> =
            topics.iter().flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p))).collect();
        if partitions.is_empty() {
            return Err(errors::invalid_request("name at least one partition whose offset to delete"));
        }
        offsets::delete_offsets(&coordinator, group_id, &partitions, COMMIT_TIMEOUT)
            .await
            .map_err(|e| errors::coordinator(&e))
    }

    /// A group described (Describe on it): its members and assignments, and its committed
    /// offsets of topics that still have the id they had at commit.
    pub fn describe_group(&self, ctx: &RequestContext, group_id: &str) -> Answer<GroupDescription> {
        self.authorize(ctx, ResourceType::Group, group_id)?;
        let coordinator = group_coordinator(&self.node, group_id)?;
        let shard = self.coordinators.groups().of(&coordinator)?;
        let classic = shard.classic().describe(group_id).map_err(|e| errors::coordinator(&e))?;
        let meta = self.node.meta();
        let current = |topic: &str, id: &[u8; 16]| meta.topics.get(topic).is_some_and(|t| t.topic_id == *id);
        let described = coordinator.read(|m| {
            let listed = listing(m, group_id);
            let mut d = GroupDescription {
                group_id: group_id.to_string(),
                protocol: listed.protocol,
                state: listed.state,
                ..GroupDescription::default()
            };
            if let Some(c) = classic {
                let listed = classic_listing(&c);
                (d.protocol, d.state) = (listed.protocol, listed.state);
                d.assignor = c.protocol.clone();
                d.group_epoch = c.generation;
                d.classic = Some(c);
            } else if let Some(g) = m.groups().get(group_id) {
                d.assignor = g.assignor.name().into();
                d.rebalance_mode = g.mode.name().into();
                d.group_epoch = g.epoch;
                d.target_epoch = g.target_epoch;
                d.members = g.members.values().map(|mem| describe_member(g, mem)).collect();
            }
            for ((topic, partition), c) in m.state().group(group_id) {
                if !current(topic, &c.topic_id) {
                    continue;
                }
                if d.offsets.last().is_none_or(|t| &t.topic != topic) {
                    d.offsets.push(TopicAnswers { topic: topic.clone(), partitions: Vec::new() });
                }
                if let Some(t) = d.offsets.last_mut() {
                    t.partitions.push((*partition, Ok(Some(c.clone()))));
                }
            }
            d
        });
        match described {
            Ok(d) if d.protocol == "simple" && d.offsets.is_empty() => Err(errors::group_not_found(group_id)),
            Ok(d) => Ok(d),
            Err(e) => Err(errors::coordinator(&e.into())),
        }
    }

    /// A member's heartbeat (KIP-848), decided by the group's coordinator: join, heartbeat or
    /// leave, answered once what it changes is committed. A heartbeat that changes nothing is
    /// held up to `wait_ms` (the wire's rule, within the session) and answered as soon as the
    /// member has something to do. Needs Read on the group and Describe on each subscribed topic.
    pub async fn consumer_group_heartbeat(
        &self,
        ctx: &RequestContext,
        heartbeat: ConsumerHeartbeat,
    ) -> Result<Answer<HeartbeatOutcome>, RequestError> {
        let req = &heartbeat.request;
        let subscribed = req.subscribed_topics.as_ref().map_or(0, Vec::len);
        let owned = req.owned.as_ref().map_or(0, |o| o.values().map(BTreeSet::len).sum());
        limits::check_counts("ConsumerGroupHeartbeat", subscribed, owned)?;
        Ok(self.heartbeat_checked(ctx, heartbeat).await)
    }

    async fn heartbeat_checked(&self, ctx: &RequestContext, heartbeat: ConsumerHeartbeat) -> Answer<HeartbeatOutcome> {
        let ConsumerHeartbeat { request: mut req, wait_ms } = heartbeat;
        self.authorize(ctx, ResourceType::Group, &req.group_id)?;
        for topic in req.subscribed_topics.iter().flatten() {
            self.authorize(ctx, ResourceType::Topic, topic)?;
        }
        req.client_id = ctx.client_id.clone();
        req.client_host = ctx.client_host.clone();
        let coordinator = group_coordinator(&self.node, &req.group_id)?;
        // Read at every decision: a held heartbeat decides again after topics changed.
        let topics = MetaTopics { service: self, ctx };
        let timeouts = self.node.config().groups;
        // A heartbeat that changes nothing is held (`wait_ms`, a long poll) by the wire's rule.
        let hold = rill_proto::heartbeat_hold(
            Duration::from_millis(u64::from(wait_ms.unwrap_or(0))),
            Duration::from_millis(u64::from(timeouts.heartbeat_interval_ms)),
            Duration::from_millis(u64::from(timeouts.session_ms)),
        );
        let shard = self.coordinators.groups().of(&coordinator)?;
        if shard.classic().has_members(&req.group_id) {
            // A classic group's first generation is in the leader's memory only until stored.
            return Err(errors::coordinator(&CoordinatorError::InconsistentGroupProtocol {
                group_id: req.group_id.clone(),
                reason: "a classic group with members holds the id".into(),
            }));
        }
        let sessions = shard.sessions();
        let poll = rill_coordinator::offsets::membership::LongPoll {
            turns: shard.turns(),
            held: shard.held(),
            sessions,
            hold,
            topics: self.node.meta_watch(),
        };
        let decision = rill_coordinator::offsets::membership::consumer_heartbeat_held(
            &coordinator,
            &req,
            &topics,
            timeouts,
            HEARTBEAT_TIMEOUT,
            poll,
        )
        .await
        .map_err(|e| errors::coordinator(&e))?;
        sessions.heard(coordinator.replica().group(), &req.group_id, &req.member_id, decision.member.as_ref());
        Ok(HeartbeatOutcome { answer: decision.answer, session_timeout_ms: timeouts.session_ms })
    }

    /// Commits offsets of a group (Read on it; each partition answered on its own, Read on its
    /// topic) for its member at its epoch, or for nobody in a group without members.
    pub async fn commit_offsets(
        &self,
        ctx: &RequestContext,
        group_id: &str,
        member_id: &str,
        generation_id: i32,
        topics: Vec<CommitTopic>,
    ) -> Result<Answer<Vec<TopicAnswers<()>>>, RequestError> {
        limits::check_counts("CommitOffsets", topics.len(), topics.iter().map(|t| t.partitions.len()).sum())?;
        Ok(self.commit_checked(ctx, group_id, member_id, generation_id, topics).await)
    }

    async fn commit_checked(
        &self,
        ctx: &RequestContext,
        group_id: &str,
        member_id: &str,
        generation_id: i32,
        topics: Vec<CommitTopic>,
    ) -> Answer<Vec<TopicAnswers<()>>> {
        self.authorize(ctx, ResourceType::Group, group_id)?;
        let Checked { coordinator, committer, accepted, answers } =
            self.check_commit(ctx, group_id, member_id, generation_id, topics)?;
        if !accepted.is_empty() {
            offsets::commit(&coordinator, group_id, committer, &accepted, COMMIT_TIMEOUT)
                .await
                .map_err(|e| errors::coordinator(&e))?;
        }
        Ok(answers)
    }

    /// Commits offsets inside a transaction (Kafka's `TxnOffsetCommit`; Write on the
    /// transactional id, Read on the group, Read on each topic): pending in the group's
    /// partition until the transaction's marker commits or drops them, once the transaction's
    /// coordinator has verified the group is in the transaction (v1) or added it (v2).
    pub async fn txn_commit_offsets(
        &self,
        ctx: &RequestContext,
        req: TxnCommit,
    ) -> Result<Answer<Vec<TopicAnswers<()>>>, RequestError> {
        let count = req.topics.iter().map(|t| t.partitions.len()).sum();
        limits::check_counts("TxnCommitOffsets", req.topics.len(), count)?;
        Ok(self.txn_commit_checked(ctx, req).await)
    }

    async fn txn_commit_checked(&self, ctx: &RequestContext, req: TxnCommit) -> Answer<Vec<TopicAnswers<()>>> {
        self.authorize(ctx, ResourceType::TransactionalId, &req.transactional_id)?;
        self.authorize(ctx, ResourceType::Group, &req.group_id)?;
        let epoch = checks::producer_epoch(req.producer_epoch)?;
        transactions::validate(&req.transactional_id, 0).map_err(|e| errors::coordinator(&e))?;
        let Checked { coordinator, committer, accepted, answers } =
            self.check_commit(ctx, &req.group_id, &req.member_id, req.generation_id, req.topics)?;
        if accepted.is_empty() {
            return Ok(answers);
        }
        let producer = (req.producer_id, epoch);
        let identity = (req.transactional_id.as_str(), producer);
        let prepared = txn_offsets::prepare(&coordinator, &req.group_id, committer, identity, &accepted)
            .map_err(|e| errors::coordinator(&e))?;
        // Transactions v2: the group joins the transaction here (no AddOffsetsToTxn).
        let add = checks::txn_protocol(req.transaction_version)? == transactions::TxnProtocol::V2;
        let verified = self.verifier.verify_group(&req.transactional_id, producer, &req.group_id, add).await?;
        let verified = (verified.transaction, verified.owed);
        txn_offsets::commit(&coordinator, prepared, verified, committer, COMMIT_TIMEOUT)
            .await
            .map_err(|e| errors::coordinator(&e))?;
        Ok(answers)
    }

    /// A group's committed offsets (Describe on it; each partition answered on its own, Describe
    /// on its topic), once a quorum confirms this node still coordinates it: the partitions
    /// named, or every committed one the caller may describe. An offset counts only while its
    /// topic has the id it had at commit. With `require_stable`, a partition with a
    /// transactional commit pending answers `UNSTABLE_OFFSET_COMMIT` (and, asked for all, is
    /// listed even before its first commit).
    pub async fn fetch_offsets(
        &self,
        ctx: &RequestContext,
        group_id: &str,
        topics: Vec<NamedPartitions>,
        require_stable: bool,
    ) -> Result<Answer<Answers<Option<CommittedOffset>>>, RequestError> {
        limits::check_counts("FetchOffsets", topics.len(), topics.iter().map(|t| t.partitions.len()).sum())?;
        Ok(self.fetch_offsets_checked(ctx, group_id, topics, require_stable).await)
    }

    async fn fetch_offsets_checked(
        &self,
        ctx: &RequestContext,
        group_id: &str,
        topics: Vec<NamedPartitions>,
        require_stable: bool,
    ) -> Answer<Answers<Option<CommittedOffset>>> {
        self.authorize(ctx, ResourceType::Group, group_id)?;
        let coordinator = group_coordinator(&self.node, group_id)?;
        let meta = self.node.meta();
        let current = |topic: &str, id: &[u8; 16]| meta.topics.get(topic).is_some_and(|t| t.topic_id == *id);
        let answer = offsets::read(&coordinator, READ_TIMEOUT, |state| {
            let result = |topic: &str, partition: u32| -> Answer<Option<CommittedOffset>> {
                if require_stable && state.txn().is_pending(group_id, topic, partition) {
                    return Err(errors::unstable_offset_commit(group_id, topic, partition));
                }
                Ok(state.committed(group_id, topic, partition).filter(|c| current(topic, &c.topic_id)).cloned())
            };
            if topics.is_empty() {
                // Every committed partition; with require_stable, every pending one too (a
                // partition whose first commit is pending is unstable, not absent).
                let mut named: BTreeSet<(String, u32)> = state
                    .group(group_id)
                    .filter(|((topic, _), c)| current(topic, &c.topic_id))
                    .map(|(tp, _)| tp.clone())
                    .collect();
                if require_stable {
                    named.extend(state.txn().pending_partitions(group_id));
                }
                let mut by_topic: Answers<Option<CommittedOffset>> = Vec::new();
                for (topic, partition) in named.iter().filter(|(t, _)| self.lists(ctx, ResourceType::Topic, t)) {
                    if by_topic.last().is_none_or(|t| &t.topic != topic) {
                        by_topic.push(TopicAnswers { topic: topic.clone(), partitions: Vec::new() });
                    }
                    if let Some(t) = by_topic.last_mut() {
                        t.partitions.push((*partition, result(topic, *partition)));
                    }
                }
                by_topic
            } else {
                topics
                    .iter()
                    .map(|t| {
                        let denied = self.authorize(ctx, ResourceType::Topic, &t.topic).err();
                        let partitions = t
                            .partitions
                            .iter()
                            .map(|p| match &denied {
                                Some(e) => (*p, Err(e.clone())),
                                None => (*p, result(&t.topic, *p)),
                            })
                            .collect();
                        TopicAnswers { topic: t.topic.clone(), partitions }
                    })
                    .collect()
            }
        })
        .await;
        answer.map_err(|e| errors::coordinator(&e))
    }
}

/// A commit checked before it is proposed: the group's coordinator partition, who commits, the
/// offsets to commit and each partition's answer.
struct Checked<'a> {
    coordinator: std::sync::Arc<rill_broker::StatePartition<OffsetsMachine>>,
    committer: Committer<'a>,
    accepted: Vec<rill_coordinator::OffsetCommit>,
    answers: Vec<TopicAnswers<()>>,
}

impl Service {
    /// What a commit of `group_id` by `member_id` at `generation_id` — plain or transactional —
    /// goes through before it is proposed: the coordinator (this node must lead it), who commits,
    /// and each offset checked against the metadata and the caller's Read on its topic.
    fn check_commit<'a>(
        &self,
        ctx: &RequestContext,
        group_id: &str,
        member_id: &'a str,
        generation_id: i32,
        topics: Vec<CommitTopic>,
    ) -> Answer<Checked<'a>> {
        let coordinator = group_coordinator(&self.node, group_id)?;
        let shard = self.coordinators.groups().of(&coordinator)?;
        let committer = committer(&shard, group_id, member_id, generation_id)?;
        let refused = |topic: &str| self.authorize(ctx, ResourceType::Topic, topic).err();
        let (accepted, answers) = checks::committed_offsets(&self.node.meta(), topics, refused);
        Ok(Checked { coordinator, committer, accepted, answers })
    }
}

/// Who commits offsets of `group_id` as `member_id` at `generation` (a member epoch, or a classic
/// generation): nobody, a KIP-848 member, or — in a classic group, once the leader's memory
/// allows it (Kafka's `validateOffsetCommit`) — a classic member.
fn committer<'a>(shard: &GroupShard, group_id: &str, member_id: &'a str, generation: i32) -> Answer<Committer<'a>> {
    let classic = shard.classic().is_classic(group_id).map_err(|e| errors::coordinator(&e))?;
    if !classic {
        return checks::committer(member_id, generation);
    }
    shard.classic().check_commit(group_id, member_id, generation).map_err(|e| errors::coordinator(&e))?;
    Ok(if member_id.is_empty() && generation < 0 {
        Committer::Standalone
    } else {
        Committer::Classic { member_id, generation }
    })
}

/// A classic group as `ListGroups` shows it.
fn classic_listing(d: &ClassicDescription) -> GroupListing {
    GroupListing {
        group_id: d.group_id.clone(),
        protocol: "classic".into(),
        protocol_type: d.protocol_type.clone(),
        state: d.state.name().into(),
        members: d.members.len() as u32,
    }
}

/// One group as `ListGroups` shows it, from its coordinator's state.
fn listing(m: &OffsetsMachine, group_id: &str) -> GroupListing {
    match m.groups().get(group_id) {
        Some(g) => GroupListing {
            group_id: group_id.to_string(),
            protocol: "consumer".into(),
            protocol_type: "consumer".into(),
            state: g.state().name().into(),
            members: g.members.len() as u32,
        },
        None => GroupListing {
            group_id: group_id.to_string(),
            protocol: "simple".into(),
            protocol_type: String::new(),
            state: consumer_groups::GroupState::Empty.name().into(),
            members: 0,
        },
    }
}

/// The record topics of the metadata as a group decision reads them, at each read: a held
/// heartbeat decides again after topics changed. Internal topics are never assigned to
/// consumers, and no pattern matches them. A pattern matches only topics the caller may
/// describe (Kafka resolves patterns with the heartbeating member's rights too); names were
/// authorized one by one before the decision.
struct MetaTopics<'a> {
    service: &'a Service,
    ctx: &'a RequestContext,
}

impl consumer_groups::TopicSource for MetaTopics<'_> {
    fn topic(&self, name: &str) -> Option<SubscribedTopic> {
        let meta = self.service.node.meta();
        meta.topics.get(name).filter(|t| !t.is_internal()).map(subscribed_topic)
    }

    fn matching(&self, pattern: &consumer_groups::TopicPattern) -> Vec<(String, SubscribedTopic)> {
        let meta = self.service.node.meta();
        meta.topics
            .values()
            .filter(|t| !t.is_internal() && pattern.matches(&t.name))
            .filter(|t| self.service.lists(self.ctx, ResourceType::Topic, &t.name))
            .map(|t| (t.name.clone(), subscribed_topic(t)))
            .collect()
    }
}

fn subscribed_topic(t: &rill_meta::TopicMeta) -> SubscribedTopic {
    SubscribedTopic { topic_id: t.topic_id, partitions: u32::try_from(t.partitions.len()).unwrap_or(u32::MAX) }
}

fn describe_member(g: &consumer_groups::ConsumerGroup, m: &consumer_groups::Member) -> MemberDescription {
    MemberDescription {
        member_id: m.member_id.clone(),
        instance_id: m.instance_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topics: m.subscribed.iter().cloned().collect(),
        subscribed_topic_regex: m.subscribed_regex.clone(),
        member_epoch: m.epoch,
        state: if m.is_away() { "away".into() } else { m.state.name().into() },
        assignment: m.assigned.clone(),
        revoking: m.revoking.clone(),
        target: g.target_of(&m.member_id),
    }
}
