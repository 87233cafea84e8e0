//! The public `Share` service: share groups' fetches and acknowledgements, and their settings —
//! each decoded into a [`Service`] call and its answer encoded.

use rill_broker::share::Ack;
use rill_proto::common::{ErrorCode, RecordBatch};
use rill_proto::share::share_server::Share;
use rill_proto::share::{
    AcknowledgeType, Acknowledgement, AcknowledgementResult, AcquiredRecords, AlterShareGroupConfigRequest,
    DescribeShareGroupConfigRequest, DescribeShareGroupRequest, DescribeShareGroupResponse, ListShareGroupsRequest,
    ListShareGroupsResponse, ShareAcknowledgePartitionResult, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResult, ShareFetchPartitionResult, ShareFetchRequest, ShareFetchResponse, ShareFetchTopic,
    ShareFetchTopicResult, ShareGroupConfigResponse, ShareGroupListing, ShareGroupSetting, ShareHeldRecord,
    SharePartitionState,
};
use tonic::{Request, Response, Status};

use crate::api::rules::{context, rpc};
use crate::api::{error_of, request_status};
use crate::service::share::{self, AckRange, SharePartitionAcks, ShareTopic};
use crate::service::share_admin::{GroupSetting, SharePartitionView};
use crate::service::{Answer, Service};

/// The `Share` service.
pub struct ShareApi {
    service: Service,
}

impl ShareApi {
    /// The service over `service`.
    pub fn new(service: Service) -> Self {
        Self { service }
    }
}

fn ack_range(a: &Acknowledgement) -> AckRange {
    let ack = match AcknowledgeType::try_from(a.r#type) {
        Ok(AcknowledgeType::Accept) => Ack::Accept,
        Ok(AcknowledgeType::Release) => Ack::Release { delay_ms: a.delay_ms },
        Ok(AcknowledgeType::Reject) => Ack::Reject { reason: a.reason.clone() },
        Ok(AcknowledgeType::Renew) => Ack::Renew,
        // An unknown type is refused by the range check: an empty range cannot be expressed,
        // so make it backwards.
        Err(_) => return AckRange { first: 1, last: 0, ack: Ack::Renew },
    };
    AckRange { first: a.first_offset, last: a.last_offset, ack }
}

/// The service's form of a share request's topics and their acknowledgements; an unknown
/// acknowledgement type refuses the request.
pub fn topics(topics: Vec<ShareFetchTopic>) -> Result<Vec<ShareTopic>, Status> {
    topics
        .into_iter()
        .map(|t| {
            // Unknown acknowledgement types refuse the whole request: a client that sends one
            // means something this node does not do.
            for p in &t.partitions {
                if let Some(a) = p.acknowledgements.iter().find(|a| AcknowledgeType::try_from(a.r#type).is_err()) {
                    return Err(Status::invalid_argument(format!("unknown acknowledgement type {}", a.r#type)));
                }
            }
            Ok(ShareTopic {
                topic: t.topic,
                topic_id: t.topic_id.to_vec(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| SharePartitionAcks {
                        partition: p.partition,
                        acks: p.acknowledgements.iter().map(ack_range).collect(),
                    })
                    .collect(),
            })
        })
        .collect()
}

fn refused(refusals: impl IntoIterator<Item = (u64, rill_broker::share::AckRefusal)>) -> Vec<AcknowledgementResult> {
    refusals
        .into_iter()
        .map(|(offset, why)| {
            let (offset, refusal) = share::ack_refusal(offset, why);
            AcknowledgementResult { offset, error_code: refusal.code as i32, error_message: refusal.message }
        })
        .collect()
}

fn config_response(answer: Answer<Vec<GroupSetting>>) -> ShareGroupConfigResponse {
    let (error_code, error_message, _) = error_of(&answer);
    let settings = answer
        .unwrap_or_default()
        .into_iter()
        .map(|s| ShareGroupSetting { key: s.key, value: s.value, default: s.default })
        .collect();
    ShareGroupConfigResponse { error_code, error_message, settings }
}

/// One partition's answer to a fetch.
fn fetch_result(partition: u32, answer: Answer<share::ShareFetchOutcome>) -> ShareFetchPartitionResult {
    let (error_code, error_message, leader) = error_of(&answer);
    let Ok(outcome) = answer else {
        return ShareFetchPartitionResult { partition, error_code, error_message, leader, ..Default::default() };
    };
    let acquired = outcome
        .acquired_ranges()
        .into_iter()
        .map(|(first, last, count)| AcquiredRecords {
            first_offset: first,
            last_offset: last,
            delivery_count: u32::from(count),
        })
        .collect();
    let fetched = outcome.fetched;
    ShareFetchPartitionResult {
        partition,
        error_code: ErrorCode::None as i32,
        acquired,
        lock_until_ms: fetched.lock_until_ms,
        refused: refused(fetched.refused.iter().copied()),
        high_watermark: fetched.high_watermark as i64,
        log_start_offset: fetched.log_start_offset as i64,
        batches: fetched
            .batches
            .into_iter()
            .map(|b| RecordBatch { base_offset: b.base_offset as i64, data: b.data, append_time_ms: b.append_time_ms })
            .collect(),
        ..Default::default()
    }
}

/// One partition's answer to an acknowledgement.
fn acknowledge_result(
    partition: u32,
    answer: Answer<share::ShareAcknowledgeOutcome>,
) -> ShareAcknowledgePartitionResult {
    let (error_code, error_message, leader) = error_of(&answer);
    let refused = answer.map(|a| refused(a.refused)).unwrap_or_default();
    ShareAcknowledgePartitionResult { partition, error_code, error_message, refused, leader }
}

#[tonic::async_trait]
impl Share for ShareApi {
    async fn share_fetch(&self, request: Request<ShareFetchRequest>) -> Result<Response<ShareFetchResponse>, Status> {
        let ctx = context(&request, rpc::SHARE_FETCH)?;
        let req = request.into_inner();
        let fetch = share::ShareFetchRequest {
            group: req.group_id,
            member: req.member_id,
            max_wait_ms: req.max_wait_ms,
            max_records: req.max_records,
            max_bytes: req.max_bytes,
            topics: topics(req.topics)?,
        };
        let answers = self.service.share_fetch(&ctx, fetch).await.map_err(|e| request_status(&e))?;
        let topics = answers
            .into_iter()
            .map(|t| ShareFetchTopicResult {
                topic: t.topic,
                partitions: t.partitions.into_iter().map(|(p, answer)| fetch_result(p, answer)).collect(),
            })
            .collect();
        Ok(Response::new(ShareFetchResponse { topics }))
    }

    async fn share_acknowledge(
        &self,
        request: Request<ShareAcknowledgeRequest>,
    ) -> Result<Response<ShareAcknowledgeResponse>, Status> {
        let ctx = context(&request, rpc::SHARE_ACKNOWLEDGE)?;
        let req = request.into_inner();
        let answers = self
            .service
            .share_acknowledge(&ctx, req.group_id, req.member_id, topics(req.topics)?)
            .await
            .map_err(|e| request_status(&e))?;
        let topics = answers
            .into_iter()
            .map(|t| ShareAcknowledgeTopicResult {
                topic: t.topic,
                partitions: t.partitions.into_iter().map(|(p, answer)| acknowledge_result(p, answer)).collect(),
            })
            .collect();
        Ok(Response::new(ShareAcknowledgeResponse { topics }))
    }

    async fn alter_share_group_config(
        &self,
        request: Request<AlterShareGroupConfigRequest>,
    ) -> Result<Response<ShareGroupConfigResponse>, Status> {
        let ctx = context(&request, rpc::ALTER_SHARE_GROUP_CONFIG)?;
        let req = request.into_inner();
        let set = req.set.into_iter().map(|s| (s.key, s.value)).collect();
        let answer = self.service.alter_share_group_config(&ctx, req.group_id, set, req.reset).await;
        Ok(Response::new(config_response(answer)))
    }

    async fn describe_share_group_config(
        &self,
        request: Request<DescribeShareGroupConfigRequest>,
    ) -> Result<Response<ShareGroupConfigResponse>, Status> {
        let ctx = context(&request, rpc::DESCRIBE_SHARE_GROUP_CONFIG)?;
        let req = request.into_inner();
        Ok(Response::new(config_response(self.service.describe_share_group_config(&ctx, &req.group_id))))
    }

    async fn describe_share_group(
        &self,
        request: Request<DescribeShareGroupRequest>,
    ) -> Result<Response<DescribeShareGroupResponse>, Status> {
        let ctx = context(&request, rpc::DESCRIBE_SHARE_GROUP)?;
        let req = request.into_inner();
        let answer = self.service.describe_share_group(&ctx, &req.group_id, req.max_records);
        let (error_code, error_message, _) = error_of(&answer);
        let (now_ms, views) = answer.unwrap_or_default();
        let partitions = views.into_iter().map(partition_state).collect();
        Ok(Response::new(DescribeShareGroupResponse { error_code, error_message, now_ms, partitions }))
    }

    async fn list_share_groups(
        &self,
        request: Request<ListShareGroupsRequest>,
    ) -> Result<Response<ListShareGroupsResponse>, Status> {
        let ctx = context(&request, rpc::LIST_SHARE_GROUPS)?;
        let groups = self
            .service
            .list_share_groups(&ctx)
            .into_iter()
            .map(|(group_id, partitions)| ShareGroupListing { group_id, partitions })
            .collect();
        Ok(Response::new(ListShareGroupsResponse { groups, ..Default::default() }))
    }
}

/// One partition's state in a describe answer.
fn partition_state(v: SharePartitionView) -> SharePartitionState {
    let (dead_letter_topic, dead_letter_partition) = v.dead_letters_to.unwrap_or_default();
    SharePartitionState {
        topic: v.topic,
        partition: v.partition,
        leader_epoch: v.leader_epoch,
        start_offset: v.start_offset,
        end_offset: v.end_offset,
        high_watermark: v.high_watermark,
        acquired: v.acquired,
        available: v.available,
        delayed: v.delayed,
        dead_letter_waiting: v.dead_letter_waiting,
        oldest_pending_append_ms: v.oldest_pending_append_ms.unwrap_or(0),
        held: v
            .held
            .into_iter()
            .map(|h| ShareHeldRecord {
                offset: h.offset,
                member_id: h.member,
                delivery_count: u32::from(h.delivery_count),
                lock_until_ms: h.lock_until_ms,
                acquired_ms: h.acquired_ms,
            })
            .collect(),
        dead_letter_topic,
        dead_letter_partition,
    }
}
