//! The public `Records` service: Produce, Fetch, ListOffsets, InitProducerId — each decoded into
//! a [`Service`] call and its answer encoded, per partition.

use rill_broker::{Acks, FetchOutcome, Isolation, ProduceOutcome};
use rill_proto::common::{ErrorCode, RecordBatch};
use rill_proto::records::records_server::Records;
use rill_proto::records::{
    self as pb, FetchPartitionResult, FetchRequest, FetchResponse, FetchTopicResult, InitProducerIdRequest,
    InitProducerIdResponse, IsolationLevel, ListOffsetsPartitionResult, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResult, PartitionProduceResult, ProduceRequest, ProduceResponse, RecordError, TopicProduceResult,
};
use tonic::{Request, Response, Status};

use crate::api::request_status;
use crate::api::rules::{context, rpc};
use crate::errors::{self, Refusal};
use crate::service::records::{self as svc, ListedOffset, OffsetSpec};
use crate::service::{Answer, Service};

/// The `Records` service.
pub struct RecordsApi {
    service: Service,
}

impl RecordsApi {
    /// The service over `service`.
    pub fn new(service: Service) -> Self {
        Self { service }
    }
}

/// The isolation level a read asks for.
fn isolation(level: i32) -> Result<Isolation, Status> {
    match IsolationLevel::try_from(level) {
        Ok(IsolationLevel::ReadCommitted) => Ok(Isolation::ReadCommitted),
        Ok(IsolationLevel::ReadUncommitted) => Ok(Isolation::ReadUncommitted),
        Err(_) => Err(errors::invalid_request_status(format!(
            "unknown isolation level {level}: 0 is READ_COMMITTED, 1 READ_UNCOMMITTED"
        ))),
    }
}

/// The acks a produce asks for; every partition is refused when the value is unknown.
fn acks(raw: i32) -> Answer<Acks> {
    match pb::Acks::try_from(raw) {
        Ok(pb::Acks::All) => Ok(Acks::All),
        Ok(pb::Acks::Leader) => Ok(Acks::Leader),
        Ok(pb::Acks::None) => Ok(Acks::None),
        Err(_) => Err(errors::invalid_acks(raw)),
    }
}

fn produced(partition: u32, answer: Answer<ProduceOutcome>) -> PartitionProduceResult {
    match answer {
        Ok(out) => PartitionProduceResult {
            partition,
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            base_offset: out.base_offset.map_or(-1, |o| o as i64),
            append_time_ms: out.append_time_ms,
            leader: None,
            record_errors: Vec::new(),
        },
        Err(e) => PartitionProduceResult {
            partition,
            error_code: e.code as i32,
            error_message: e.message,
            base_offset: -1,
            append_time_ms: -1,
            leader: e.leader,
            record_errors: e
                .records
                .into_iter()
                .map(|r| RecordError { batch_index: r.index, message: r.message })
                .collect(),
        },
    }
}

/// A fetched partition. Rill's gRPC answer leaves out what `read_committed` must not see —
/// aborted transactions' batches and markers — so that no client built from `proto/` needs an
/// aborted-transaction index of its own.
fn fetched(partition: u32, answer: Answer<FetchOutcome>, isolation: Isolation) -> FetchPartitionResult {
    match answer {
        Ok(mut out) => {
            if isolation == Isolation::ReadCommitted {
                out.leave_out_aborted();
            }
            FetchPartitionResult {
                partition,
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                high_watermark: out.high_watermark as i64,
                last_stable_offset: out.last_stable_offset as i64,
                next_offset: out.next_offset as i64,
                log_start_offset: out.log_start_offset as i64,
                batches: out
                    .batches
                    .into_iter()
                    .map(|b| RecordBatch {
                        base_offset: b.base_offset as i64,
                        data: b.data,
                        append_time_ms: b.append_time_ms,
                    })
                    .collect(),
                leader: None,
            }
        }
        Err(e) => FetchPartitionResult {
            partition,
            error_code: e.code as i32,
            error_message: e.message,
            high_watermark: -1,
            log_start_offset: -1,
            batches: Vec::new(),
            leader: e.leader,
            last_stable_offset: -1,
            next_offset: -1,
        },
    }
}

fn listed(partition: u32, answer: Answer<ListedOffset>) -> ListOffsetsPartitionResult {
    match answer {
        Ok(listed) => ListOffsetsPartitionResult {
            partition,
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            offset: listed.offset.map_or(-1, |o| o as i64),
            leader: None,
            timestamp_ms: listed.timestamp_ms.unwrap_or(-1),
        },
        Err(e) => ListOffsetsPartitionResult {
            partition,
            error_code: e.code as i32,
            error_message: e.message,
            offset: -1,
            leader: e.leader,
            timestamp_ms: -1,
        },
    }
}

fn producer_id(answer: Answer<(i64, i16)>) -> InitProducerIdResponse {
    match answer {
        Ok((producer_id, epoch)) => InitProducerIdResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            producer_id,
            producer_epoch: i32::from(epoch),
            coordinator: None,
        },
        Err(Refusal { code, message, leader, .. }) => InitProducerIdResponse {
            error_code: code as i32,
            error_message: message,
            producer_id: -1,
            producer_epoch: -1,
            coordinator: leader,
        },
    }
}

#[tonic::async_trait]
impl Records for RecordsApi {
    async fn produce(&self, request: Request<ProduceRequest>) -> Result<Response<ProduceResponse>, Status> {
        let ctx = context(&request, rpc::PRODUCE)?;
        let req = request.into_inner();
        let input = svc::ProduceRequest {
            transactional_id: req.transactional_id,
            transaction_version: req.transaction_version,
            acks: acks(req.acks),
            timeout_ms: req.timeout_ms,
            topics: req
                .topics
                .into_iter()
                .map(|t| svc::TopicBatches {
                    topic: t.topic,
                    topic_id: t.topic_id,
                    partitions: t.partitions.into_iter().map(|p| (p.partition, p.batch)).collect(),
                })
                .collect(),
            // Concurrent calls are independent: a client orders its batches by awaiting them.
            turn: None,
        };
        let answers = self.service.produce(&ctx, input).await.map_err(|e| request_status(&e))?;
        let topics = answers
            .into_iter()
            .map(|t| TopicProduceResult {
                topic: t.topic,
                partitions: t.partitions.into_iter().map(|(p, answer)| produced(p, answer)).collect(),
            })
            .collect();
        Ok(Response::new(ProduceResponse { topics }))
    }

    async fn fetch(&self, request: Request<FetchRequest>) -> Result<Response<FetchResponse>, Status> {
        let ctx = context(&request, rpc::FETCH)?;
        let req = request.into_inner();
        let isolation = isolation(req.isolation_level)?;
        let input = svc::FetchRequest {
            max_wait_ms: req.max_wait_ms,
            isolation,
            max_bytes: req.max_bytes,
            topics: req
                .topics
                .into_iter()
                .map(|t| svc::FetchTopic {
                    topic: t.topic,
                    topic_id: t.topic_id,
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| svc::FetchPartition {
                            partition: p.partition,
                            offset: p.fetch_offset,
                            max_bytes: p.max_bytes,
                            current_leader_epoch: None,
                        })
                        .collect(),
                })
                .collect(),
        };
        let answers = self.service.fetch(&ctx, input).await.map_err(|e| request_status(&e))?;
        let topics = answers
            .into_iter()
            .map(|t| FetchTopicResult {
                topic: t.topic,
                partitions: t.partitions.into_iter().map(|(p, answer)| fetched(p, answer, isolation)).collect(),
            })
            .collect();
        Ok(Response::new(FetchResponse { topics }))
    }

    async fn init_producer_id(
        &self,
        request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        let ctx = context(&request, rpc::INIT_PRODUCER_ID)?;
        let req = request.into_inner();
        let input = svc::InitProducerIdRequest {
            transactional_id: req.transactional_id,
            transaction_timeout_ms: req.transaction_timeout_ms,
            current: req.current.map(|c| (c.producer_id, c.producer_epoch)),
        };
        Ok(Response::new(producer_id(self.service.init_producer_id(&ctx, input).await)))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let ctx = context(&request, rpc::LIST_OFFSETS)?;
        let req = request.into_inner();
        let spec = match pb::OffsetSpec::try_from(req.spec) {
            Ok(pb::OffsetSpec::Earliest) => OffsetSpec::Earliest,
            Ok(pb::OffsetSpec::Latest) => OffsetSpec::Latest,
            Ok(pb::OffsetSpec::Timestamp) => OffsetSpec::Timestamp(req.timestamp_ms),
            Ok(pb::OffsetSpec::RecordTimestamp) => OffsetSpec::RecordTimestamp(req.timestamp_ms),
            Ok(pb::OffsetSpec::MaxTimestamp) => OffsetSpec::MaxTimestamp,
            Err(_) => return Err(errors::invalid_request_status(format!("unknown offset spec {}", req.spec))),
        };
        let isolation = isolation(req.isolation_level)?;
        let topics = req
            .topics
            .into_iter()
            .map(|t| svc::ListOffsetsTopic {
                topic: t.topic,
                partitions: t.partitions.into_iter().map(|p| (p, spec)).collect(),
            })
            .collect();
        let answers = self.service.list_offsets(&ctx, isolation, topics).await.map_err(|e| request_status(&e))?;
        let topics = answers
            .into_iter()
            .map(|t| ListOffsetsTopicResult {
                topic: t.topic,
                partitions: t.partitions.into_iter().map(|(p, answer)| listed(p, answer)).collect(),
            })
            .collect();
        Ok(Response::new(ListOffsetsResponse { topics }))
    }
}
