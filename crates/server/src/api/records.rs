//! The public `Records` service: Produce, Fetch, ListOffsets. Answers per partition.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, select_all};
use rill_broker::{Acks, Isolation};
use rill_proto::common::{ErrorCode, RecordBatch};
use rill_proto::records::records_server::Records;
use rill_proto::records::{
    self as pb, FetchPartitionResult, FetchRequest, FetchResponse, FetchTopicResult, InitProducerIdRequest,
    InitProducerIdResponse, IsolationLevel, ListOffsetsPartitionResult, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResult, OffsetSpec, PartitionProduceResult, ProduceRequest, ProduceResponse, TopicProduceResult,
};
use tonic::{Request, Response, Status};

use rill_coordinator::transactions;
use rill_meta::PartitionKind;

use crate::api::authz::{rpc, Authorization};
use crate::api::limits::{self, SeenPartitions};
use crate::api::routing::{coordinator_here, local_replica};
use crate::errors::{self, WireError};
use crate::node::{Hosted, Node};

/// Produce timeout when the request gives none.
const DEFAULT_PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest produce timeout a request may ask for.
const MAX_PRODUCE_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest fetch long-poll.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(60);
/// Fetch response budget when the request gives none.
const DEFAULT_FETCH_MAX_BYTES: usize = 8 << 20;
/// How long a transactional `InitProducerId` may take to be committed by its coordinator.
const INIT_PRODUCER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a produce waits for this node's metadata to show that its producer id was issued.
const ISSUED_ID_WAIT: Duration = Duration::from_secs(1);
/// Per-partition fetch budget when the request gives none.
const DEFAULT_PARTITION_MAX_BYTES: usize = 1 << 20;

/// The `Records` service.
pub struct RecordsApi {
    node: Arc<Node>,
    authz: Authorization,
}

impl RecordsApi {
    /// The service for `node`.
    pub fn new(node: Arc<Node>, authz: Authorization) -> Self {
        Self { node, authz }
    }
}

fn produce_error(partition: u32, e: WireError) -> PartitionProduceResult {
    PartitionProduceResult {
        partition,
        error_code: e.code as i32,
        error_message: e.message,
        base_offset: -1,
        append_time_ms: -1,
        leader: e.leader,
    }
}

fn fetch_error(partition: u32, e: WireError) -> FetchPartitionResult {
    FetchPartitionResult {
        partition,
        error_code: e.code as i32,
        error_message: e.message,
        high_watermark: -1,
        log_start_offset: -1,
        batches: Vec::new(),
        leader: e.leader,
        last_stable_offset: -1,
        next_offset: -1,
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

fn list_error(partition: u32, e: WireError) -> ListOffsetsPartitionResult {
    ListOffsetsPartitionResult {
        partition,
        error_code: e.code as i32,
        error_message: e.message,
        offset: -1,
        leader: e.leader,
    }
}

impl RecordsApi {
    /// `InitProducerId` with a transactional id, on its coordinator: the id's producer with its
    /// epoch bumped (fencing older instances), or a new producer id when there is none yet or
    /// the epoch would overflow.
    async fn init_transactional(
        &self,
        transactional_id: &str,
        timeout_ms: u32,
        current: Option<&pb::ProducerIdAndEpoch>,
    ) -> Result<(i64, i16), WireError> {
        let expected = match current {
            None => None,
            Some(c) => match i16::try_from(c.producer_epoch) {
                Ok(epoch) if c.producer_id >= 0 && epoch >= 0 => Some((c.producer_id, epoch)),
                _ => {
                    return Err(WireError::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "current producer id {} and epoch {}: an id of at least 0 and a 16-bit epoch of at least 0",
                            c.producer_id, c.producer_epoch
                        ),
                    ))
                }
            },
        };
        let partition = match coordinator_here(&self.node, PartitionKind::TransactionState, transactional_id)? {
            Hosted::Transactions(p) => p,
            _ => return Err(errors::coordinator_not_created(rill_meta::TRANSACTION_STATE_TOPIC)),
        };
        let node = self.node.clone();
        let new_producer_id = move || {
            let node = node.clone();
            async move { node.next_producer_id().await.map_err(|e| e.to_string()) }
        };
        let timeout = INIT_PRODUCER_TIMEOUT;
        transactions::init_producer_id(&partition, transactional_id, timeout_ms, expected, new_producer_id, timeout)
            .await
            .map_err(|e| errors::coordinator(&e))
    }

    /// Refuses a batch under a producer id the cluster never issued, so that made-up ids cannot
    /// fill a partition's producer table and lock real producers out. Ids are issued in blocks
    /// through the metadata, so every issued id is below the metadata's next one; an id issued
    /// by another node moments ago may not have reached this node's metadata yet, so it waits
    /// briefly for it. (The header is read only to find the id; the batch is checked later.)
    async fn check_issued(&self, batch: &bytes::Bytes) -> Result<(), WireError> {
        let Ok(info) = rill_records::BatchInfo::parse(batch) else { return Ok(()) };
        if !info.has_producer() {
            return Ok(());
        }
        let issued = |m: &rill_meta::MetaState| info.producer_id < m.next_producer_id;
        if issued(&self.node.meta()) || self.node.wait_for_meta(ISSUED_ID_WAIT, issued).await {
            return Ok(());
        }
        Err(errors::unissued_producer_id(info.producer_id))
    }

    async fn produce_one(
        &self,
        topic: &str,
        topic_id: &[u8],
        p: pb::PartitionProduce,
        acks: Result<Acks, WireError>,
        timeout: Duration,
        txn: Option<&Transactional>,
    ) -> PartitionProduceResult {
        let acks = match acks {
            Ok(a) => a,
            Err(e) => return produce_error(p.partition, e),
        };
        if p.batch.is_empty() {
            return produce_error(p.partition, errors::missing_batch(p.partition));
        }
        let replica = match local_replica(&self.node, topic, topic_id, p.partition) {
            Ok(r) => r,
            Err(e) => return produce_error(p.partition, e),
        };
        if let Err(e) = self.check_issued(&p.batch).await {
            return produce_error(p.partition, e);
        }
        let produced = match txn {
            None => replica.produce(p.batch, acks, timeout).await,
            Some(_) if acks != Acks::All => {
                Err(rill_broker::PartitionError::InvalidRequest("transactional batches need acks=all".into()))
            }
            Some(t) => {
                let header = rill_records::BatchInfo::parse(&p.batch).ok();
                let producer = header.map_or((-1, -1), |h| (h.producer_id, h.producer_epoch));
                let verify = crate::txn_verify::Verify {
                    transactional_id: t.id.clone(),
                    producer,
                    topic: topic.to_string(),
                    partition: p.partition,
                    verify_only: t.verify_only,
                };
                let node = self.node.clone();
                // Boxed: the coordinator's future is deep, and the produce path nests it again.
                let verify = || Box::pin(crate::txn_verify::verify(&node, verify.clone()));
                replica.produce_transactional(p.batch, timeout, verify).await
            }
        };
        match produced {
            Ok(out) => PartitionProduceResult {
                partition: p.partition,
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                base_offset: out.base_offset.map_or(-1, |o| o as i64),
                append_time_ms: out.append_time_ms,
                leader: None,
            },
            Err(e) => produce_error(p.partition, errors::partition(&e, |id| self.node.client_addr(id))),
        }
    }
}

/// A transactional produce's id and protocol.
struct Transactional {
    id: String,
    /// v1: the partition must have been added already; v2: the first batch adds it.
    verify_only: bool,
}

/// The transactional part of a produce request (`None` for a plain one).
fn transactional(id: &str, version: u32) -> Result<Option<Transactional>, Status> {
    if id.is_empty() {
        return Ok(None);
    }
    transactions::validate(id, 0).map_err(|e| errors::invalid_request_status(e.to_string()))?;
    let verify_only = match version {
        0 | 1 => true,
        2 => false,
        v => {
            return Err(errors::invalid_request_status(format!(
                "unknown transaction version {v}: 1 (partitions added with AddPartitionsToTxn) or 2 (added by the first batch)"
            )))
        }
    };
    Ok(Some(Transactional { id: id.to_string(), verify_only }))
}

fn parse_acks(raw: i32) -> Result<Acks, WireError> {
    match pb::Acks::try_from(raw) {
        Ok(pb::Acks::All) => Ok(Acks::All),
        Ok(pb::Acks::Leader) => Ok(Acks::Leader),
        Ok(pb::Acks::None) => Ok(Acks::None),
        Err(_) => Err(errors::invalid_acks(raw)),
    }
}

#[tonic::async_trait]
impl Records for RecordsApi {
    async fn produce(&self, request: Request<ProduceRequest>) -> Result<Response<ProduceResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        let acks = parse_acks(req.acks);
        let timeout = match req.timeout_ms {
            0 => DEFAULT_PRODUCE_TIMEOUT,
            ms => Duration::from_millis(u64::from(ms)).min(MAX_PRODUCE_TIMEOUT),
        };
        limits::check_counts("Produce", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        self.authz.authorize(&principal, rpc::PRODUCE, &req)?;
        let txn = transactional(&req.transactional_id, req.transaction_version)?;
        let txn = txn.as_ref();
        let mut seen = SeenPartitions::default();
        let topics = req.topics.into_iter().map(|t| {
            let acks = acks.clone();
            let duplicates: Vec<bool> = t.partitions.iter().map(|p| !seen.first(&t.topic, p.partition)).collect();
            async move {
                let parts = t.partitions.into_iter().zip(duplicates).map(|(p, duplicate)| {
                    let topic = t.topic.clone();
                    let topic_id = t.topic_id.clone();
                    let acks = acks.clone();
                    async move {
                        if duplicate {
                            return produce_error(p.partition, errors::duplicate_partition(&topic, p.partition));
                        }
                        self.produce_one(&topic, &topic_id, p, acks, timeout, txn).await
                    }
                });
                TopicProduceResult { partitions: join_all(parts).await, topic: t.topic }
            }
        });
        Ok(Response::new(ProduceResponse { topics: join_all(topics).await }))
    }

    async fn fetch(&self, request: Request<FetchRequest>) -> Result<Response<FetchResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        let max_wait = Duration::from_millis(u64::from(req.max_wait_ms)).min(MAX_FETCH_WAIT);
        let isolation = isolation(req.isolation_level)?;
        let response_budget = match req.max_bytes {
            0 => DEFAULT_FETCH_MAX_BYTES,
            n => (n as usize).min(rill_proto::MAX_GRPC_MESSAGE_BYTES / 2),
        };
        // Resolve every partition once; errors are answered as they are.
        struct Target {
            topic_idx: usize,
            partition: u32,
            offset: i64,
            max_bytes: usize,
            replica: Result<Arc<rill_broker::Partition>, WireError>,
        }
        limits::check_counts("Fetch", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        self.authz.authorize(&principal, rpc::FETCH, &req)?;
        let mut seen = SeenPartitions::default();
        let mut targets = Vec::new();
        let mut results: Vec<FetchTopicResult> = Vec::new();
        for (ti, t) in req.topics.iter().enumerate() {
            results.push(FetchTopicResult { topic: t.topic.clone(), partitions: Vec::new() });
            for p in &t.partitions {
                let max_bytes = match p.max_bytes {
                    0 => DEFAULT_PARTITION_MAX_BYTES,
                    n => n as usize,
                };
                let replica = if seen.first(&t.topic, p.partition) {
                    local_replica(&self.node, &t.topic, &t.topic_id, p.partition)
                } else {
                    Err(errors::duplicate_partition(&t.topic, p.partition))
                };
                targets.push(Target {
                    topic_idx: ti,
                    partition: p.partition,
                    offset: p.fetch_offset,
                    max_bytes,
                    replica,
                });
            }
        }
        // Long poll: when nothing is available yet, wait until any partition has data.
        let available = |targets: &[Target]| -> usize {
            targets
                .iter()
                .filter_map(|t| t.replica.as_ref().ok().map(|r| (r, t.offset)))
                .map(|(r, o)| usize::from(o >= 0 && r.readable_end(isolation) > o as u64))
                .sum()
        };
        if !max_wait.is_zero() && available(&targets) == 0 {
            let deadline = rill_rt::now() + max_wait;
            let waits: Vec<_> = targets
                .iter()
                .filter_map(|t| match (&t.replica, u64::try_from(t.offset)) {
                    (Ok(r), Ok(o)) => Some(Box::pin(async move { r.wait_for_data(o, deadline, isolation).await })),
                    _ => None,
                })
                .collect();
            if !waits.is_empty() {
                let _ = select_all(waits).await;
            }
        }
        let mut used = 0usize;
        for t in targets {
            let result = match t.replica {
                Err(e) => fetch_error(t.partition, e),
                Ok(r) => {
                    let budget = if used >= response_budget { 0 } else { t.max_bytes.min(response_budget - used) };
                    if budget == 0 {
                        // Over the response budget: answer the partition empty; the consumer
                        // fetches it next time.
                        FetchPartitionResult {
                            partition: t.partition,
                            error_code: ErrorCode::None as i32,
                            error_message: String::new(),
                            high_watermark: r.high_watermark() as i64,
                            log_start_offset: r.log_start_offset() as i64,
                            batches: Vec::new(),
                            leader: None,
                            last_stable_offset: r.last_stable_offset().min(r.high_watermark()) as i64,
                            next_offset: t.offset,
                        }
                    } else {
                        match r.fetch(t.offset, budget, isolation) {
                            Ok(mut out) => {
                                // What was read counts against the budget, returned or not.
                                used += out.batches.iter().map(|b| b.data.len()).sum::<usize>();
                                if isolation == Isolation::ReadCommitted {
                                    out.leave_out_aborted();
                                }
                                FetchPartitionResult {
                                    partition: t.partition,
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
                            Err(e) => fetch_error(t.partition, errors::partition(&e, |id| self.node.client_addr(id))),
                        }
                    }
                }
            };
            results[t.topic_idx].partitions.push(result);
        }
        Ok(Response::new(FetchResponse { topics: results }))
    }

    async fn init_producer_id(
        &self,
        request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        let principal = self.authz.principal(&request);
        self.authz.authorize(&principal, rpc::INIT_PRODUCER_ID, request.get_ref())?;
        let req = request.into_inner();
        let answer = if req.transactional_id.is_empty() {
            self.node.next_producer_id().await.map(|id| (id, 0)).map_err(|e| errors::propose(&e))
        } else {
            self.init_transactional(&req.transactional_id, req.transaction_timeout_ms, req.current.as_ref()).await
        };
        Ok(Response::new(match answer {
            Ok((producer_id, epoch)) => InitProducerIdResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                producer_id,
                producer_epoch: i32::from(epoch),
                coordinator: None,
            },
            Err(e) => InitProducerIdResponse {
                error_code: e.code as i32,
                error_message: e.message,
                producer_id: -1,
                producer_epoch: -1,
                coordinator: e.leader,
            },
        }))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        let spec = OffsetSpec::try_from(req.spec)
            .map_err(|_| errors::invalid_request_status(format!("unknown offset spec {}", req.spec)))?;
        let isolation = isolation(req.isolation_level)?;
        limits::check_counts("ListOffsets", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        self.authz.authorize(&principal, rpc::LIST_OFFSETS, &req)?;
        let mut seen = SeenPartitions::default();
        let topics = req
            .topics
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        if seen.first(&t.topic, *p) {
                            local_replica(&self.node, &t.topic, &[], *p)
                        } else {
                            Err(errors::duplicate_partition(&t.topic, *p))
                        }
                    })
                    .zip(t.partitions.iter())
                    .map(|(replica, p)| match replica {
                        Err(e) => list_error(*p, e),
                        Ok(r) => {
                            let offset = match spec {
                                OffsetSpec::Earliest => r.earliest_offset(),
                                OffsetSpec::Latest => r.latest_offset(isolation),
                                OffsetSpec::Timestamp => r.offset_for_time(req.timestamp_ms, isolation),
                            };
                            match offset {
                                Ok(o) => ListOffsetsPartitionResult {
                                    partition: *p,
                                    error_code: ErrorCode::None as i32,
                                    error_message: String::new(),
                                    offset: o as i64,
                                    leader: None,
                                },
                                Err(e) => list_error(*p, errors::partition(&e, |id| self.node.client_addr(id))),
                            }
                        }
                    })
                    .collect();
                ListOffsetsTopicResult { topic: t.topic, partitions }
            })
            .collect();
        Ok(Response::new(ListOffsetsResponse { topics }))
    }
}
