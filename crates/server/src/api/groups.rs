//! The public `Groups` service: consumer groups' membership (KIP-848 heartbeats), committed
//! offsets, descriptions, listings and deletions — each decoded into a [`Service`] call and its
//! answer encoded.

use rill_coordinator::groups::classic::{self, ClassicDescription};
use rill_coordinator::groups::{HeartbeatRequest, TopicPartitions};
use rill_coordinator::offsets::CommittedOffset;
use rill_proto::common::ErrorCode;
use rill_proto::groups::groups_server::Groups;
use rill_proto::groups::{
    ClassicGroupDescription, ClassicMemberDescription, GroupHeartbeatRequest, GroupHeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, JoinedMember, LeaveGroupRequest, LeaveGroupResponse, LeftMember, SyncGroupRequest,
    SyncGroupResponse,
};
use rill_proto::groups::{
    CommitOffsetsRequest, CommitOffsetsResponse, CommitPartitionResult, CommitTopic, CommitTopicResult,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupRequest, DeleteGroupResponse,
    DeleteOffsetsRequest, DeleteOffsetsResponse, DescribeGroupRequest, DescribeGroupResponse,
    FetchOffsetsPartitionResult, FetchOffsetsRequest, FetchOffsetsResponse, FetchOffsetsTopic, FetchOffsetsTopicResult,
    GroupListing, ListGroupsRequest, ListGroupsResponse, MemberDescription, OwnedPartitions,
    TopicPartitions as WirePartitions, TxnCommitOffsetsRequest,
};
use tonic::{Request, Response, Status};

use crate::api::rules::{context, rpc};
use crate::api::{error_of, request_status};
use crate::service::checks::{self, NamedPartitions};
use crate::service::classic::JoinOutcome;
use crate::service::groups as svc;
use crate::service::{Answer, Answers, Service, TopicAnswers};

/// The `Groups` service.
pub struct GroupsApi {
    service: Service,
}

impl GroupsApi {
    /// The service over `service`.
    pub fn new(service: Service) -> Self {
        Self { service }
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

fn commit_topics(topics: Vec<CommitTopic>) -> Vec<checks::CommitTopic> {
    topics
        .into_iter()
        .map(|t| checks::CommitTopic {
            topic: t.topic,
            partitions: t
                .partitions
                .into_iter()
                .map(|p| checks::CommitPartition {
                    partition: p.partition,
                    offset: p.offset,
                    metadata: p.metadata,
                    leader_epoch: None,
                })
                .collect(),
        })
        .collect()
}

fn named(topics: Vec<FetchOffsetsTopic>) -> Vec<NamedPartitions> {
    topics.into_iter().map(|t| NamedPartitions { topic: t.topic, partitions: t.partitions }).collect()
}

fn committed(answer: Answer<Vec<TopicAnswers<()>>>) -> CommitOffsetsResponse {
    let (error_code, error_message, coordinator) = error_of(&answer);
    let topics = answer
        .unwrap_or_default()
        .into_iter()
        .map(|t| CommitTopicResult {
            topic: t.topic,
            partitions: t
                .partitions
                .into_iter()
                .map(|(partition, answer)| {
                    let (error_code, error_message, _) = error_of(&answer);
                    CommitPartitionResult { partition, error_code, error_message }
                })
                .collect(),
        })
        .collect();
    CommitOffsetsResponse { error_code, error_message, coordinator, topics }
}

fn offsets_to_wire(topics: Answers<Option<CommittedOffset>>) -> Vec<FetchOffsetsTopicResult> {
    topics
        .into_iter()
        .map(|t| FetchOffsetsTopicResult {
            topic: t.topic,
            partitions: t
                .partitions
                .into_iter()
                .map(|(partition, answer)| match answer {
                    Ok(found) => FetchOffsetsPartitionResult {
                        partition,
                        offset: found.as_ref().map_or(-1, |c| c.offset),
                        metadata: found.as_ref().map(|c| c.metadata.clone()).unwrap_or_default(),
                        commit_time_ms: found.as_ref().map_or(-1, |c| c.commit_time_ms),
                        error_code: ErrorCode::None as i32,
                        error_message: String::new(),
                    },
                    Err(e) => FetchOffsetsPartitionResult {
                        partition,
                        offset: -1,
                        error_code: e.code as i32,
                        error_message: e.message,
                        ..Default::default()
                    },
                })
                .collect(),
        })
        .collect()
}

fn member_to_wire(m: svc::MemberDescription) -> MemberDescription {
    MemberDescription {
        member_id: m.member_id,
        instance_id: m.instance_id,
        client_id: m.client_id,
        client_host: m.client_host,
        subscribed_topics: m.subscribed_topics,
        subscribed_topic_regex: m.subscribed_topic_regex,
        member_epoch: m.member_epoch,
        state: m.state,
        assignment: Some(partitions_to_wire(&m.assignment)),
        revoking: Some(partitions_to_wire(&m.revoking)),
        target: Some(partitions_to_wire(&m.target)),
    }
}

fn classic_to_wire(d: ClassicDescription) -> ClassicGroupDescription {
    ClassicGroupDescription {
        generation_id: d.generation,
        protocol_type: d.protocol_type,
        protocol_name: d.protocol,
        leader: d.leader,
        members: d
            .members
            .into_iter()
            .map(|m| ClassicMemberDescription {
                member_id: m.member_id,
                instance_id: m.instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                assignment: m.assignment,
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl Groups for GroupsApi {
    async fn join_group(&self, request: Request<JoinGroupRequest>) -> Result<Response<JoinGroupResponse>, Status> {
        let mut ctx = context(&request, rpc::JOIN_GROUP)?;
        let req = request.into_inner();
        // gRPC carries the member's client id in the request itself.
        ctx.client_id = req.client_id;
        let join = classic::JoinGroup {
            group_id: req.group_id,
            member_id: req.member_id,
            instance_id: req.instance_id,
            protocol_type: req.protocol_type,
            protocols: req
                .protocols
                .into_iter()
                .map(|p| classic::Protocol { name: p.name, metadata: p.metadata })
                .collect(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            client_id: String::new(),
            client_host: String::new(),
            legacy_member_id: false,
        };
        Ok(Response::new(match self.service.join_group(&ctx, join).await {
            Ok(JoinOutcome::MemberIdRequired { member_id, refusal }) => JoinGroupResponse {
                error_code: refusal.code as i32,
                error_message: refusal.message,
                member_id,
                generation_id: -1,
                ..Default::default()
            },
            Ok(JoinOutcome::Joined(a)) => JoinGroupResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator: None,
                member_id: a.member_id,
                generation_id: a.generation,
                protocol_type: a.protocol_type,
                protocol_name: a.protocol_name,
                leader: a.leader,
                skip_assignment: a.skip_assignment,
                members: a
                    .members
                    .into_iter()
                    .map(|m| JoinedMember { member_id: m.member_id, instance_id: m.instance_id, metadata: m.metadata })
                    .collect(),
            },
            Err(e) => JoinGroupResponse {
                error_code: e.code as i32,
                error_message: e.message,
                coordinator: e.leader,
                generation_id: -1,
                ..Default::default()
            },
        }))
    }

    async fn sync_group(&self, request: Request<SyncGroupRequest>) -> Result<Response<SyncGroupResponse>, Status> {
        let ctx = context(&request, rpc::SYNC_GROUP)?;
        let req = request.into_inner();
        let sync = classic::SyncGroup {
            group_id: req.group_id,
            member_id: req.member_id,
            instance_id: req.instance_id,
            generation: req.generation_id,
            protocol_type: req.protocol_type,
            protocol_name: req.protocol_name,
            assignments: req.assignments.into_iter().map(|a| (a.member_id, a.assignment)).collect(),
        };
        Ok(Response::new(match self.service.sync_group(&ctx, sync).await {
            Ok(a) => SyncGroupResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator: None,
                protocol_type: a.protocol_type,
                protocol_name: a.protocol_name,
                assignment: a.assignment,
            },
            Err(e) => SyncGroupResponse {
                error_code: e.code as i32,
                error_message: e.message,
                coordinator: e.leader,
                ..Default::default()
            },
        }))
    }

    async fn group_heartbeat(
        &self,
        request: Request<GroupHeartbeatRequest>,
    ) -> Result<Response<GroupHeartbeatResponse>, Status> {
        let ctx = context(&request, rpc::GROUP_HEARTBEAT)?;
        let req = request.into_inner();
        let heartbeat = classic::Heartbeat {
            group_id: req.group_id,
            member_id: req.member_id,
            instance_id: req.instance_id,
            generation: req.generation_id,
        };
        let (error_code, error_message, coordinator) = error_of(&self.service.group_heartbeat(&ctx, &heartbeat));
        Ok(Response::new(GroupHeartbeatResponse { error_code, error_message, coordinator }))
    }

    async fn leave_group(&self, request: Request<LeaveGroupRequest>) -> Result<Response<LeaveGroupResponse>, Status> {
        let ctx = context(&request, rpc::LEAVE_GROUP)?;
        let req = request.into_inner();
        let leave = classic::LeaveGroup {
            group_id: req.group_id,
            members: req
                .members
                .into_iter()
                .map(|m| classic::Leaving { member_id: m.member_id, instance_id: m.instance_id })
                .collect(),
        };
        let answer = self.service.leave_group(&ctx, &leave).map_err(|e| request_status(&e))?;
        let (error_code, error_message, coordinator) = error_of(&answer);
        let members = answer
            .unwrap_or_default()
            .into_iter()
            .map(|left| {
                let (code, message) = match left.result {
                    Ok(()) => (ErrorCode::None as i32, String::new()),
                    Err(e) => {
                        let e = crate::errors::coordinator(&e);
                        (e.code as i32, e.message)
                    }
                };
                LeftMember {
                    member_id: left.member.member_id,
                    instance_id: left.member.instance_id,
                    error_code: code,
                    error_message: message,
                }
            })
            .collect();
        Ok(Response::new(LeaveGroupResponse { error_code, error_message, coordinator, members }))
    }

    async fn list_groups(&self, request: Request<ListGroupsRequest>) -> Result<Response<ListGroupsResponse>, Status> {
        let ctx = context(&request, rpc::LIST_GROUPS)?;
        let groups = self
            .service
            .list_groups(&ctx)
            .into_iter()
            .map(|g| GroupListing { group_id: g.group_id, protocol: g.protocol, state: g.state, members: g.members })
            .collect();
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
        let ctx = context(&request, rpc::DELETE_GROUP)?;
        let answer = self.service.delete_group(&ctx, &request.into_inner().group_id).await;
        let (error_code, error_message, coordinator) = error_of(&answer);
        Ok(Response::new(DeleteGroupResponse { error_code, error_message, coordinator }))
    }

    async fn delete_offsets(
        &self,
        request: Request<DeleteOffsetsRequest>,
    ) -> Result<Response<DeleteOffsetsResponse>, Status> {
        let ctx = context(&request, rpc::DELETE_OFFSETS)?;
        let req = request.into_inner();
        let answer = self
            .service
            .delete_offsets(&ctx, &req.group_id, named(req.topics))
            .await
            .map_err(|e| request_status(&e))?;
        let (error_code, error_message, coordinator) = error_of(&answer);
        Ok(Response::new(DeleteOffsetsResponse { error_code, error_message, coordinator }))
    }

    async fn describe_group(
        &self,
        request: Request<DescribeGroupRequest>,
    ) -> Result<Response<DescribeGroupResponse>, Status> {
        let ctx = context(&request, rpc::DESCRIBE_GROUP)?;
        let answer = self.service.describe_group(&ctx, &request.into_inner().group_id);
        Ok(Response::new(match answer {
            Ok(d) => DescribeGroupResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator: None,
                group_id: d.group_id,
                protocol: d.protocol,
                state: d.state,
                assignor: d.assignor,
                rebalance_mode: d.rebalance_mode,
                group_epoch: d.group_epoch,
                target_epoch: d.target_epoch,
                members: d.members.into_iter().map(member_to_wire).collect(),
                offsets: offsets_to_wire(d.offsets),
                classic: d.classic.map(classic_to_wire),
            },
            Err(e) => DescribeGroupResponse {
                error_code: e.code as i32,
                error_message: e.message,
                coordinator: e.leader,
                ..Default::default()
            },
        }))
    }

    async fn consumer_group_heartbeat(
        &self,
        request: Request<ConsumerGroupHeartbeatRequest>,
    ) -> Result<Response<ConsumerGroupHeartbeatResponse>, Status> {
        let mut ctx = context(&request, rpc::CONSUMER_GROUP_HEARTBEAT)?;
        let req = request.into_inner();
        // gRPC carries the member's client id in the heartbeat itself.
        ctx.client_id = req.client_id;
        let heartbeat = svc::ConsumerHeartbeat {
            request: HeartbeatRequest {
                group_id: req.group_id,
                member_id: req.member_id,
                member_epoch: req.member_epoch,
                instance_id: req.instance_id,
                rack_id: req.rack_id,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                subscribed_topics: req.subscribed_topics.map(|s| s.topics),
                subscribed_regex: req.subscribed_topic_regex,
                server_assignor: req.server_assignor,
                rebalance_mode: req.rebalance_mode,
                owned: req.owned.as_ref().map(partitions_from_wire),
                client_id: String::new(),
                client_host: String::new(),
            },
            wait_ms: req.wait_ms,
        };
        let answer = self.service.consumer_group_heartbeat(&ctx, heartbeat).await.map_err(|e| request_status(&e))?;
        Ok(Response::new(match answer {
            Ok(out) => ConsumerGroupHeartbeatResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator: None,
                member_id: out.answer.member_id,
                member_epoch: out.answer.member_epoch,
                heartbeat_interval_ms: out.answer.heartbeat_interval_ms,
                session_timeout_ms: out.session_timeout_ms,
                assignment: out.answer.assignment.as_ref().map(partitions_to_wire),
            },
            Err(e) => ConsumerGroupHeartbeatResponse {
                error_code: e.code as i32,
                error_message: e.message,
                coordinator: e.leader,
                ..Default::default()
            },
        }))
    }

    async fn commit_offsets(
        &self,
        request: Request<CommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        let ctx = context(&request, rpc::COMMIT_OFFSETS)?;
        let req = request.into_inner();
        let topics = commit_topics(req.topics);
        let answer = self
            .service
            .commit_offsets(&ctx, &req.group_id, &req.member_id, req.generation_id, topics)
            .await
            .map_err(|e| request_status(&e))?;
        Ok(Response::new(committed(answer)))
    }

    async fn txn_commit_offsets(
        &self,
        request: Request<TxnCommitOffsetsRequest>,
    ) -> Result<Response<CommitOffsetsResponse>, Status> {
        let ctx = context(&request, rpc::TXN_COMMIT_OFFSETS)?;
        let req = request.into_inner();
        let commit = svc::TxnCommit {
            transactional_id: req.transactional_id,
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
            transaction_version: req.transaction_version,
            group_id: req.group_id,
            member_id: req.member_id,
            generation_id: req.generation_id,
            topics: commit_topics(req.topics),
        };
        let answer = self.service.txn_commit_offsets(&ctx, commit).await.map_err(|e| request_status(&e))?;
        Ok(Response::new(committed(answer)))
    }

    async fn fetch_offsets(
        &self,
        request: Request<FetchOffsetsRequest>,
    ) -> Result<Response<FetchOffsetsResponse>, Status> {
        let ctx = context(&request, rpc::FETCH_OFFSETS)?;
        let req = request.into_inner();
        let answer = self
            .service
            .fetch_offsets(&ctx, &req.group_id, named(req.topics), req.require_stable)
            .await
            .map_err(|e| request_status(&e))?;
        let (error_code, error_message, coordinator) = error_of(&answer);
        let topics = answer.map(offsets_to_wire).unwrap_or_default();
        Ok(Response::new(FetchOffsetsResponse { error_code, error_message, coordinator, topics }))
    }
}
