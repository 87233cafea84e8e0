//! The public `Groups` service: consumer groups' membership (KIP-848 heartbeats), committed
//! offsets and descriptions, served by each group's coordinator (the leader of the
//! `__consumer_offsets` partition the group id hashes to).

use std::sync::Arc;
use std::time::Duration;

use rill_broker::StatePartition;
use rill_coordinator::groups::{self as consumer_groups, HeartbeatRequest, SubscribedTopic, TopicPartitions};
use rill_coordinator::offsets::{self, Committer, MAX_OFFSET_METADATA_BYTES};
use rill_coordinator::{transactions, txn_offsets};
use rill_coordinator::{OffsetCommit, OffsetsMachine};
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;
use rill_proto::groups::groups_server::Groups;
use rill_proto::groups::{
    CommitOffsetsRequest, CommitOffsetsResponse, CommitPartitionResult, CommitTopic, CommitTopicResult,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupRequest, DeleteGroupResponse,
    DeleteOffsetsRequest, DeleteOffsetsResponse, DescribeGroupRequest, DescribeGroupResponse,
    FetchOffsetsPartitionResult, FetchOffsetsRequest, FetchOffsetsResponse, FetchOffsetsTopicResult, GroupListing,
    ListGroupsRequest, ListGroupsResponse, MemberDescription, OwnedPartitions, TopicPartitions as WirePartitions,
    TxnCommitOffsetsRequest,
};
use tonic::{Request, Response, Status};

use crate::api::authz::{rpc, Authorization, ResourceType};
use crate::api::limits::{self, SeenPartitions};
use crate::api::routing::coordinator_here;
use crate::errors::{self, WireError};
use crate::node::{Hosted, Node};

/// How long a commit may take to be committed by the coordinator's partition.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a coordinator may take to confirm with a quorum that it still leads before it
/// answers a read of committed offsets.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a membership change may take to be committed: well within a member's session.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `Groups` service.
pub struct GroupsApi {
    node: Arc<Node>,
    authz: Authorization,
}

impl GroupsApi {
    /// The service for `node`.
    pub fn new(node: Arc<Node>, authz: Authorization) -> Self {
        Self { node, authz }
    }

    /// The node's session timers of consumer group members.
    fn sessions(&self) -> &consumer_groups::sessions::Sessions {
        self.node.group_sessions()
    }

    /// The group's coordinator partition, when this node leads it... or the error to answer.
    fn coordinator(&self, group_id: &str) -> Result<Arc<StatePartition<OffsetsMachine>>, WireError> {
        offsets::validate_group_id(group_id).map_err(|e| errors::coordinator(&e))?;
        match coordinator_here(&self.node, PartitionKind::ConsumerOffsets, group_id)? {
            Hosted::Offsets(p) => Ok(p),
            _ => Err(errors::coordinator_not_created(rill_meta::CONSUMER_OFFSETS_TOPIC)),
        }
    }
}

fn commit_error(e: WireError) -> CommitOffsetsResponse {
    CommitOffsetsResponse {
        error_code: e.code as i32,
        error_message: e.message,
        coordinator: e.leader,
        topics: Vec::new(),
    }
}

fn fetch_error(e: WireError) -> FetchOffsetsResponse {
    FetchOffsetsResponse {
        error_code: e.code as i32,
        error_message: e.message,
        coordinator: e.leader,
        topics: Vec::new(),
    }
}

fn heartbeat_error(e: WireError) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse {
        error_code: e.code as i32,
        error_message: e.message,
        coordinator: e.leader,
        ..Default::default()
    }
}

/// One group as `ListGroups` shows it, from its coordinator's state.
fn listing(m: &OffsetsMachine, group_id: &str) -> GroupListing {
    match m.groups().get(group_id) {
        Some(g) => GroupListing {
            group_id: group_id.to_string(),
            protocol: "consumer".into(),
            state: g.state().name().into(),
            members: g.members.len() as u32,
        },
        None => GroupListing {
            group_id: group_id.to_string(),
            protocol: "simple".into(),
            state: consumer_groups::GroupState::Empty.name().into(),
            members: 0,
        },
    }
}

fn describe_member(g: &consumer_groups::ConsumerGroup, m: &consumer_groups::Member) -> MemberDescription {
    MemberDescription {
        member_id: m.member_id.clone(),
        instance_id: m.instance_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topics: m.subscribed.iter().cloned().collect(),
        member_epoch: m.epoch,
        state: if m.is_away() { "away".into() } else { m.state.name().into() },
        assignment: Some(partitions_to_wire(&m.assigned)),
        revoking: Some(partitions_to_wire(&m.revoking)),
        target: Some(partitions_to_wire(&g.target_of(&m.member_id))),
    }
}

fn partitions_from_wire(owned: &OwnedPartitions) -> TopicPartitions {
    let mut out = TopicPartitions::new();
    for t in owned.topics.iter().filter(|t| !t.partitions.is_empty()) {
        out.entry(t.topic.clone()).or_default().extend(t.partitions.iter().copied());
    }
    out
}

fn partitions_to_wire(set: &TopicPartitions) -> OwnedPartitions {
    OwnedPartitions {
        topics: set
            .iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(topic, p)| WirePartitions { topic: topic.clone(), partitions: p.iter().copied().collect() })
            .collect(),
    }
}

fn partition_ok(partition: u32) -> CommitPartitionResult {
    CommitPartitionResult { partition, error_code: ErrorCode::None as i32, error_message: String::new() }
}

fn partition_error(partition: u32, e: WireError) -> CommitPartitionResult {
    CommitPartitionResult { partition, error_code: e.code as i32, error_message: e.message }
}

/// Who commits, from a request's member id and generation (member epoch).
fn committer(member_id: &str, generation_id: i32) -> Result<Committer<'_>, WireError> {
    match (member_id, generation_id) {
        ("", g) if g < 0 => Ok(Committer::Standalone),
        ("", _) => Err(errors::invalid_request(
            "a commit without a member id must carry generation_id -1 (a group without members)",
        )),
        (member_id, epoch) => Ok(Committer::Member { member_id, epoch }),
    }
}

/// The answer to a commit whose accepted offsets are committed (or pending).
fn committed(topics: Vec<CommitTopicResult>) -> CommitOffsetsResponse {
    CommitOffsetsResponse {
        error_code: ErrorCode::None as i32,
        error_message: String::new(),
        coordinator: None,
        topics,
    }
}

impl GroupsApi {
    /// Checks every offset of a commit against the metadata this node holds: the good ones to
    /// commit, and each partition's answer.
    fn checked_offsets(&self, topics: Vec<CommitTopic>) -> (Vec<OffsetCommit>, Vec<CommitTopicResult>) {
        let meta = self.node.meta();
        let mut seen = SeenPartitions::default();
        let mut accepted = Vec::new();
        let mut results = Vec::new();
        for t in topics {
            let mut partitions = Vec::new();
            let topic = meta.topics.get(&t.topic).filter(|topic| !topic.is_internal());
            for p in t.partitions {
                let checked = match topic {
                    None => Err(errors::unknown_topic(&t.topic)),
                    Some(topic) if p.partition as usize >= topic.partitions.len() => {
                        Err(errors::unknown_partition(&t.topic, p.partition, topic.partitions.len()))
                    }
                    Some(_) if !seen.first(&t.topic, p.partition) => {
                        Err(errors::duplicate_partition(&t.topic, p.partition))
                    }
                    Some(_) if p.offset < 0 => Err(errors::negative_offset(p.offset)),
                    Some(_) if p.metadata.len() > MAX_OFFSET_METADATA_BYTES => {
                        Err(errors::offset_metadata_too_large(p.metadata.len(), MAX_OFFSET_METADATA_BYTES))
                    }
                    Some(topic) => Ok(OffsetCommit {
                        topic: t.topic.clone(),
                        topic_id: topic.topic_id,
                        partition: p.partition,
                        offset: p.offset,
                        metadata: p.metadata,
                    }),
                };
                match checked {
                    Ok(c) => {
                        accepted.push(c);
                        partitions.push(partition_ok(p.partition));
                    }
                    Err(e) => partitions.push(partition_error(p.partition, e)),
                }
            }
            results.push(CommitTopicResult { topic: t.topic, partitions });
        }
        (accepted, results)
    }
}

#[tonic::async_trait]
impl Groups for GroupsApi {
    async fn list_groups(&self, request: Request<ListGroupsRequest>) -> Result<Response<ListGroupsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        self.authz.authorize(&principal, rpc::LIST_GROUPS, &req)?;
        let mut groups = Vec::new();
        for p in self.node.offsets_replicas() {
            // Only a caught-up leader answers for its partition; the client asks every leader.
            let Ok(listed) = p.read(|m| {
                let ids: std::collections::BTreeSet<&String> =
                    m.state().group_ids().chain(m.groups().iter().map(|g| &g.group_id)).collect();
                ids.into_iter().map(|id| listing(m, id)).collect::<Vec<_>>()
            }) else {
                continue;
            };
            groups.extend(
                listed
                    .into_iter()
                    .filter(|g| self.authz.lists(&principal, rpc::LIST_GROUPS, ResourceType::Group, &g.group_id)),
            );
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(Response::new(ListGroupsResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            groups,
        }))
    }

    async fn delete_group(
        &self,
        request: Request<DeleteGroupRequest>,
    ) -> Result<Response<DeleteGroupResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        self.authz.authorize(&principal, rpc::DELETE_GROUP, &req)?;
        let error = |e: WireError| DeleteGroupResponse {
            error_code: e.code as i32,
            error_message: e.message,
            coordinator: e.leader,
        };
        let coordinator = match self.coordinator(&req.group_id) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(error(e))),
        };
        Ok(Response::new(match offsets::delete_group(&coordinator, &req.group_id, COMMIT_TIMEOUT).await {
            Ok(()) => DeleteGroupResponse::default(),
            Err(e) => error(errors::coordinator(&e)),
        }))
    }

    async fn delete_offsets(
        &self,
        request: Request<DeleteOffsetsRequest>,
    ) -> Result<Response<DeleteOffsetsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        limits::check_counts("DeleteOffsets", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        self.authz.authorize(&principal, rpc::DELETE_OFFSETS, &req)?;
        let error = |e: WireError| DeleteOffsetsResponse {
            error_code: e.code as i32,
            error_message: e.message,
            coordinator: e.leader,
        };
        let coordinator = match self.coordinator(&req.group_id) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(error(e))),
        };
        let partitions: Vec<(String, u32)> =
            req.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p))).collect();
        if partitions.is_empty() {
            return Ok(Response::new(error(errors::invalid_request(
                "name at least one partition whose offset to delete",
            ))));
        }
        Ok(Response::new(
            match offsets::delete_offsets(&coordinator, &req.group_id, &partitions, COMMIT_TIMEOUT).await {
                Ok(()) => DeleteOffsetsResponse::default(),
                Err(e) => error(errors::coordinator(&e)),
            },
        ))
    }

    async fn describe_group(
        &self,
        request: Request<DescribeGroupRequest>,
    ) -> Result<Response<DescribeGroupResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        self.authz.authorize(&principal, rpc::DESCRIBE_GROUP, &req)?;
        let describe_error = |e: WireError| DescribeGroupResponse {
            error_code: e.code as i32,
            error_message: e.message,
            coordinator: e.leader,
            ..Default::default()
        };
        let coordinator = match self.coordinator(&req.group_id) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(describe_error(e))),
        };
        let meta = self.node.meta();
        // An offset counts only while the topic still has the id it had at commit time.
        let current = |topic: &str, id: &[u8; 16]| meta.topics.get(topic).is_some_and(|t| t.topic_id == *id);
        let described = coordinator.read(|m| {
            let listed = listing(m, &req.group_id);
            let mut resp = DescribeGroupResponse {
                error_code: ErrorCode::None as i32,
                group_id: req.group_id.clone(),
                protocol: listed.protocol,
                state: listed.state,
                ..Default::default()
            };
            if let Some(g) = m.groups().get(&req.group_id) {
                resp.assignor = g.assignor.name().into();
                resp.rebalance_mode = g.mode.name().into();
                resp.group_epoch = g.epoch;
                resp.target_epoch = g.target_epoch;
                resp.members = g.members.values().map(|mem| describe_member(g, mem)).collect();
            }
            for ((topic, partition), c) in m.state().group(&req.group_id) {
                if !current(topic, &c.topic_id) {
                    continue;
                }
                if resp.offsets.last().is_none_or(|t| &t.topic != topic) {
                    resp.offsets.push(FetchOffsetsTopicResult { topic: topic.clone(), partitions: Vec::new() });
                }
                if let Some(t) = resp.offsets.last_mut() {
                    t.partitions.push(FetchOffsetsPartitionResult {
                        partition: *partition,
                        offset: c.offset,
                        metadata: c.metadata.clone(),
                        commit_time_ms: c.commit_time_ms,
                        error_code: ErrorCode::None as i32,
                        error_message: String::new(),
                    });
                }
            }
            resp
        });
        Ok(Response::new(match described {
            Ok(resp) if resp.protocol == "simple" && resp.offsets.is_empty() => {
                describe_error(errors::group_not_found(&req.group_id))
            }
            Ok(resp) => resp,
            Err(e) => describe_error(errors::coordinator(&e.into())),
        }))
    }

    async fn consumer_group_heartbeat(
        &self,
        request: Request<ConsumerGroupHeartbeatRequest>,
    ) -> Result<Response<ConsumerGroupHeartbeatResponse>, Status> {
        let principal = self.authz.principal(&request);
        let client_host = request.remote_addr().map(|a| a.ip().to_string()).unwrap_or_default();
        let req = request.into_inner();
        let subscribed = req.subscribed_topics.as_ref().map_or(0, |s| s.topics.len());
        let owned = req.owned.as_ref().map_or(0, |o| o.topics.iter().map(|t| t.partitions.len()).sum());
        limits::check_counts("ConsumerGroupHeartbeat", subscribed, owned)?;
        self.authz.authorize(&principal, rpc::CONSUMER_GROUP_HEARTBEAT, &req)?;
        let coordinator = match self.coordinator(&req.group_id) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(heartbeat_error(e))),
        };
        // Read at every decision: a held heartbeat decides again after topics changed.
        // Internal topics are never assigned to consumers.
        let topics = |name: &str| {
            let meta = self.node.meta();
            let t = meta.topics.get(name).filter(|t| !t.is_internal())?;
            Some(SubscribedTopic { topic_id: t.topic_id, partitions: t.partitions.len() as u32 })
        };
        let decided = HeartbeatRequest {
            group_id: req.group_id.clone(),
            member_id: req.member_id,
            member_epoch: req.member_epoch,
            instance_id: req.instance_id,
            rack_id: req.rack_id,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            subscribed_topics: req.subscribed_topics.map(|s| s.topics),
            server_assignor: req.server_assignor,
            rebalance_mode: req.rebalance_mode,
            owned: req.owned.as_ref().map(partitions_from_wire),
            client_id: req.client_id,
            client_host,
        };
        let timeouts = self.node.config().groups;
        // A heartbeat that changes nothing is held (`wait_ms`, a long poll) by the wire's rule.
        let hold = rill_proto::heartbeat_hold(
            Duration::from_millis(u64::from(req.wait_ms.unwrap_or(0))),
            Duration::from_millis(u64::from(timeouts.heartbeat_interval_ms)),
            Duration::from_millis(u64::from(timeouts.session_ms)),
        );
        let poll = consumer_groups::LongPoll {
            turns: self.node.group_turns(),
            sessions: self.sessions(),
            hold,
            topics: self.node.meta_watch(),
        };
        let decision = match consumer_groups::consumer_heartbeat_held(
            &coordinator,
            &decided,
            &topics,
            timeouts,
            HEARTBEAT_TIMEOUT,
            poll,
        )
        .await
        {
            Ok(d) => d,
            Err(e) => return Ok(Response::new(heartbeat_error(errors::coordinator(&e)))),
        };
        self.sessions().heard(
            coordinator.replica().group(),
            &decided.group_id,
            &decided.member_id,
            decision.member.as_ref(),
        );
        let answer = decision.answer;
        Ok(Response::new(ConsumerGroupHeartbeatResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            coordinator: None,
            member_id: answer.member_id,
            member_epoch: answer.member_epoch,
            heartbeat_interval_ms: answer.heartbeat_interval_ms,
            session_timeout_ms: self.node.config().groups.session_ms,
            assignment: answer.assignment.as_ref().map(partitions_to_wire),
        }))
    }

    async fn commit_offsets(
        &self,
        request: Request<CommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        limits::check_counts("CommitOffsets", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        self.authz.authorize(&principal, rpc::COMMIT_OFFSETS, &req)?;
        let coordinator = match self.coordinator(&req.group_id) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(commit_error(e))),
        };
        let committer = match committer(&req.member_id, req.generation_id) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(commit_error(e))),
        };
        let (accepted, topics) = self.checked_offsets(req.topics);
        if !accepted.is_empty() {
            if let Err(e) = offsets::commit(&coordinator, &req.group_id, committer, &accepted, COMMIT_TIMEOUT).await {
                return Ok(Response::new(commit_error(errors::coordinator(&e))));
            }
        }
        Ok(Response::new(committed(topics)))
    }

    async fn txn_commit_offsets(
        &self,
        request: Request<TxnCommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        let count = req.topics.iter().map(|t| t.partitions.len()).sum();
        limits::check_counts("TxnCommitOffsets", req.topics.len(), count)?;
        self.authz.authorize(&principal, rpc::TXN_COMMIT_OFFSETS, &req)?;
        let answer = async {
            let epoch = i16::try_from(req.producer_epoch).ok().filter(|e| *e >= 0).ok_or_else(|| {
                errors::invalid_request(format!("producer epoch {} is not a 16-bit epoch", req.producer_epoch))
            })?;
            transactions::validate(&req.transactional_id, 0).map_err(|e| errors::coordinator(&e))?;
            let coordinator = self.coordinator(&req.group_id)?;
            let committer = committer(&req.member_id, req.generation_id)?;
            let (accepted, topics) = self.checked_offsets(req.topics.clone());
            if accepted.is_empty() {
                return Ok(topics);
            }
            let producer = (req.producer_id, epoch);
            let identity = (req.transactional_id.as_str(), producer);
            let prepared = txn_offsets::prepare(&coordinator, &req.group_id, committer, identity, &accepted)
                .map_err(|e| errors::coordinator(&e))?;
            // Transactions v2: the group joins the transaction here (no AddOffsetsToTxn).
            let add = match req.transaction_version {
                0 | 1 => false,
                2 => true,
                v => return Err(errors::invalid_request(format!("unknown transaction version {v}"))),
            };
            let verified =
                crate::txn_verify::verify_group(&self.node, &req.transactional_id, producer, &req.group_id, add)
                    .await?;
            let verified = (verified.transaction, verified.owed);
            txn_offsets::commit(&coordinator, prepared, verified, committer, COMMIT_TIMEOUT)
                .await
                .map_err(|e| errors::coordinator(&e))?;
            Ok(topics)
        };
        Ok(Response::new(match answer.await {
            Ok(topics) => committed(topics),
            Err(e) => commit_error(e),
        }))
    }

    async fn fetch_offsets(
        &self,
        request: Request<FetchOffsetsRequest>,
    ) -> Result<Response<FetchOffsetsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        limits::check_counts("FetchOffsets", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        self.authz.authorize(&principal, rpc::FETCH_OFFSETS, &req)?;
        let coordinator = match self.coordinator(&req.group_id) {
            Ok(c) => c,
            Err(e) => return Ok(Response::new(fetch_error(e))),
        };
        let meta = self.node.meta();
        // An offset counts only while the topic still has the id it had at commit time.
        let current = |topic: &str, id: &[u8; 16]| meta.topics.get(topic).is_some_and(|t| t.topic_id == *id);
        let answer = offsets::read(&coordinator, READ_TIMEOUT, |state| {
            let result = |topic: &str, partition: u32| {
                if req.require_stable && state.txn().is_pending(&req.group_id, topic, partition) {
                    let e = errors::unstable_offset_commit(&req.group_id, topic, partition);
                    return FetchOffsetsPartitionResult {
                        partition,
                        offset: -1,
                        error_code: e.code as i32,
                        error_message: e.message,
                        ..Default::default()
                    };
                }
                let found = state.committed(&req.group_id, topic, partition).filter(|c| current(topic, &c.topic_id));
                FetchOffsetsPartitionResult {
                    partition,
                    offset: found.map_or(-1, |c| c.offset),
                    metadata: found.map(|c| c.metadata.clone()).unwrap_or_default(),
                    commit_time_ms: found.map_or(-1, |c| c.commit_time_ms),
                    error_code: ErrorCode::None as i32,
                    error_message: String::new(),
                }
            };
            if req.topics.is_empty() {
                // Every committed partition; with require_stable, every pending one too (a
                // partition whose first commit is pending is unstable, not absent).
                let mut named: std::collections::BTreeSet<(String, u32)> = state
                    .group(&req.group_id)
                    .filter(|((topic, _), c)| current(topic, &c.topic_id))
                    .map(|(tp, _)| tp.clone())
                    .collect();
                if req.require_stable {
                    named.extend(state.txn().pending_partitions(&req.group_id));
                }
                let mut by_topic: Vec<FetchOffsetsTopicResult> = Vec::new();
                for (topic, partition) in &named {
                    if by_topic.last().is_none_or(|t| &t.topic != topic) {
                        by_topic.push(FetchOffsetsTopicResult { topic: topic.clone(), partitions: Vec::new() });
                    }
                    if let Some(t) = by_topic.last_mut() {
                        t.partitions.push(result(topic, *partition));
                    }
                }
                by_topic
            } else {
                req.topics
                    .iter()
                    .map(|t| FetchOffsetsTopicResult {
                        topic: t.topic.clone(),
                        partitions: t.partitions.iter().map(|p| result(&t.topic, *p)).collect(),
                    })
                    .collect()
            }
        })
        .await;
        Ok(Response::new(match answer {
            Ok(topics) => FetchOffsetsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator: None,
                topics,
            },
            Err(e) => fetch_error(errors::coordinator(&e)),
        }))
    }
}
