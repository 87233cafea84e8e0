//! The data APIs: `Produce`, `Fetch`, `ListOffsets`, `InitProducerId`, `DeleteRecords`. Each
//! decodes Kafka's request into the service layer's, makes the one service call the gRPC handler
//! makes, and encodes the answers, per partition, in the order the request named them.
//!
//! What Kafka's clients need that the gRPC answer does not carry is added here: every fetched
//! batch's `baseOffset` and `partitionLeaderEpoch` are written from the stored offset and the
//! Raft term the batch was appended in (both lie outside the batch's CRC), and a
//! `read_committed` answer keeps its control batches and aborted-transaction list (Kafka's
//! clients filter them themselves).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch as FetchLeader, NodeEndpoint as FetchEndpoint,
    PartitionData,
};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{
    BrokerId, DeleteRecordsRequest, DeleteRecordsResponse, FetchRequest, FetchResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse, ProducerId,
};
use kafka_protocol::protocol::StrBytes;
use rill_broker::{Acks, FetchOutcome, Isolation, ProduceOutcome, StoredBatch, SubmitTurn};
use rill_proto::common::ErrorCode;

use super::cluster::{broker_id, host_port, topic_name};
use super::errors;
use super::wire::{non_negative, offset, partition_index};
use crate::errors::{invalid_acks, kafka_code, Refusal};
use crate::service::records::{self as svc, ListedOffset, OffsetSpec};
use crate::service::topics as svc_topics;
use crate::service::{Answer, Answers, RequestContext, RequestError, Service};

/// Kafka's `FETCH_SESSION_ID_NOT_FOUND`: the client names an incremental fetch session this
/// listener never made (it makes none: every fetch is a full one).
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// Kafka's `INVALID_FETCH_SESSION_EPOCH`.
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
/// `ListOffsets`' timestamp for the log start.
const EARLIEST_TIMESTAMP: i64 = -2;
/// `ListOffsets`' timestamp for the end of what the isolation level may read.
const LATEST_TIMESTAMP: i64 = -1;
/// `ListOffsets`' timestamp for the record with the largest timestamp (v7, KIP-734).
const MAX_TIMESTAMP: i64 = -3;
/// `ListOffsets`' timestamp for the log start on local storage (v8, KIP-405).
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// Where `baseOffset` sits in a record batch.
const BASE_OFFSET_AT: usize = 0;
/// Where `partitionLeaderEpoch` sits in a record batch (after `baseOffset` and `batchLength`).
const LEADER_EPOCH_AT: usize = 12;

/// The isolation level a read asks for (Kafka's 0 is `read_uncommitted`, 1 `read_committed`).
fn isolation(level: i8) -> Option<Isolation> {
    match level {
        0 => Some(Isolation::ReadUncommitted),
        1 => Some(Isolation::ReadCommitted),
        _ => None,
    }
}

/// `Produce`; `None` for `acks=0`, which Kafka answers with nothing (the records are still
/// written). Versions 3 to 11 speak transaction protocol version 1 (partitions are added to a
/// transaction before they are written); version 12 speaks version 2, a transactional batch
/// adding its partition to the producer's transaction itself.
///
/// `turn`: the request's place among its connection's pipelined produce requests, so that its
/// batches are queued for their logs after the previous request's (`kafka::connection`).
pub async fn produce(
    service: &Service,
    ctx: &RequestContext,
    request: ProduceRequest,
    version: i16,
    turn: Option<SubmitTurn>,
) -> Option<ProduceResponse> {
    let acks = match request.acks {
        -1 => Ok(Acks::All),
        1 => Ok(Acks::Leader),
        0 => Ok(Acks::None),
        raw => Err(invalid_acks(i32::from(raw))),
    };
    let answered = request.acks != 0;
    // The indexes as the request gave them, to echo: answers come back in the same order.
    let indexes: Vec<Vec<i32>> =
        request.topic_data.iter().map(|t| t.partition_data.iter().map(|p| p.index).collect()).collect();
    let input = svc::ProduceRequest {
        transactional_id: request.transactional_id.map(|t| t.0.to_string()).unwrap_or_default(),
        transaction_version: if version >= 12 { 2 } else { 1 },
        acks,
        timeout_ms: non_negative(request.timeout_ms),
        topics: request
            .topic_data
            .into_iter()
            .map(|t| svc::TopicBatches {
                topic: t.name.0.to_string(),
                topic_id: Bytes::new(),
                partitions: t
                    .partition_data
                    .into_iter()
                    .map(|p| (partition_index(p.index), p.records.unwrap_or_default()))
                    .collect(),
            })
            .collect(),
        turn,
    };
    let names: Vec<String> = input.topics.iter().map(|t| t.topic.clone()).collect();
    let answers = service.produce(ctx, input).await;
    if !answered {
        return None;
    }
    let mut hints = LeaderHints::new(service, LeaderHints::for_produce(version));
    let responses = per_partition(answers, names, &indexes)
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, answer)| {
                    let hint = answer.as_ref().err().and_then(|refusal| hints.hint(&name, index, refusal));
                    let response = produced(index, answer, version);
                    match hint {
                        Some(h) => response.with_current_leader(
                            LeaderIdAndEpoch::default().with_leader_id(h.leader_id).with_leader_epoch(h.leader_epoch),
                        ),
                        None => response,
                    }
                })
                .collect();
            TopicProduceResponse::default().with_name(topic_name(name)).with_partition_responses(partitions)
        })
        .collect();
    let endpoints = hints
        .endpoints
        .into_iter()
        .map(|(id, host, port)| {
            NodeEndpoint::default().with_node_id(id).with_host(StrBytes::from_string(host)).with_port(port)
        })
        .collect();
    Some(ProduceResponse::default().with_responses(responses).with_node_endpoints(endpoints))
}

/// `Produce` answers carry leader hints from this version (KIP-951).
const PRODUCE_LEADER_HINTS_FROM: i16 = 10;
/// `Produce` answers name the records a batch was refused for from this version (KIP-467).
const RECORD_ERRORS_FROM: i16 = 8;
/// `Fetch` names topics by id from this version (KIP-516).
const FETCH_TOPIC_IDS_FROM: i16 = 13;
/// `Fetch` answers carry leader hints from this version (KIP-951).
const FETCH_LEADER_HINTS_FROM: i16 = 16;

/// KIP-951's leader hints: a partition refused because this node does not lead it (or, for
/// `Fetch`, because the client's leader epoch is stale) names the leader and its epoch as this
/// node knows them, and the answer carries that leader's Kafka address, so the client goes
/// there without asking for metadata first. Protocol-neutral: `Produce` and `Fetch` answers
/// carry the same fields as different types.
struct LeaderHints<'a> {
    service: &'a Service,
    /// The codes a hint is given for; none when the request's version carries no hints.
    codes: &'static [ErrorCode],
    /// The address of every leader hinted at, each once.
    endpoints: Vec<(BrokerId, String, i32)>,
}

/// A partition's leader as a hint names it.
struct LeaderHint {
    leader_id: BrokerId,
    leader_epoch: i32,
}

impl<'a> LeaderHints<'a> {
    fn new(service: &'a Service, codes: &'static [ErrorCode]) -> Self {
        Self { service, codes, endpoints: Vec::new() }
    }

    /// The hint for `topic`/`index` refused with `refusal`, when its code is one hinted at and
    /// the leader known is a node with a Kafka listener. `NOT_LEADER_OR_FOLLOWER` naming this
    /// node would send the client straight back, so it gets none; `FENCED_LEADER_EPOCH` from
    /// the leader itself hints at it with its current epoch.
    fn hint(&mut self, topic: &str, index: i32, refusal: &Refusal) -> Option<LeaderHint> {
        if !self.codes.contains(&refusal.code) {
            return None;
        }
        let partition = u32::try_from(index).ok()?;
        let (leader, epoch) = self.service.partition_leadership(topic, partition)?;
        if leader == self.service.node().id() && refusal.code == ErrorCode::NotLeaderOrFollower {
            return None;
        }
        let (host, port) = host_port(&self.service.node().kafka_addr(leader)?)?;
        let leader_id = broker_id(leader)?;
        if !self.endpoints.iter().any(|(id, _, _)| *id == leader_id) {
            self.endpoints.push((leader_id, host, port));
        }
        Some(LeaderHint { leader_id, leader_epoch: i32::try_from(epoch).unwrap_or(i32::MAX) })
    }

    /// The codes a `Produce` at `version` gets hints for.
    fn for_produce(version: i16) -> &'static [ErrorCode] {
        if version >= PRODUCE_LEADER_HINTS_FROM {
            &[ErrorCode::NotLeaderOrFollower]
        } else {
            &[]
        }
    }

    /// The codes a `Fetch` at `version` gets hints for (Kafka's broker gives them for both).
    fn for_fetch(version: i16) -> &'static [ErrorCode] {
        if version >= FETCH_LEADER_HINTS_FROM {
            &[ErrorCode::NotLeaderOrFollower, ErrorCode::FencedLeaderEpoch]
        } else {
            &[]
        }
    }
}

/// One partition's produce answer. `log_append_time_ms` is -1: Rill's topics keep the
/// producer's timestamps (Kafka's `CreateTime`). From v8 a batch refused for some of its
/// records names them (KIP-467: librdkafka fails those with `INVALID_RECORD` and the rest of
/// the batch with a code of its own, to be produced again).
fn produced(index: i32, answer: Answer<ProduceOutcome>, version: i16) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(index).with_log_append_time_ms(-1);
    match answer {
        Ok(out) => response
            .with_base_offset(out.base_offset.map_or(-1, offset))
            .with_log_start_offset(offset(out.log_start_offset)),
        Err(refusal) => {
            let record_errors = if version >= RECORD_ERRORS_FROM {
                refusal
                    .records
                    .iter()
                    .map(|r| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(i32::try_from(r.index).unwrap_or(i32::MAX))
                            .with_batch_index_error_message(Some(StrBytes::from_string(r.message.clone())))
                    })
                    .collect()
            } else {
                Vec::new()
            };
            response
                .with_error_code(errors::produce_code(&refusal))
                .with_error_message(Some(StrBytes::from_string(refusal.message)))
                .with_record_errors(record_errors)
                .with_base_offset(-1)
                .with_log_start_offset(-1)
        }
    }
}

/// `Fetch`, versions 4 to 17: topics by name to v12, by id from v13 (KIP-516; an id no topic
/// has: `UNKNOWN_TOPIC_ID`), with leader hints from v16 (KIP-951). Sessionless: a request that
/// opens a session (id 0, epoch 0) is answered as a full fetch with session id 0, which tells
/// the client no session was made; one that names a session is refused, as Kafka refuses a
/// session it lost. Versions 15 and 17 add fields only brokers' replicas send.
pub async fn fetch(service: &Service, ctx: &RequestContext, request: FetchRequest, version: i16) -> FetchResponse {
    let by_id = version >= FETCH_TOPIC_IDS_FROM;
    let indexes: Vec<Vec<i32>> =
        request.topics.iter().map(|t| t.partitions.iter().map(|p| p.partition).collect()).collect();
    // Each topic as the request named it, to name it alike in the answer.
    let keys: Vec<(String, uuid::Uuid)> = request.topics.iter().map(|t| (t.topic.0.to_string(), t.topic_id)).collect();
    let topic = |(name, id): &(String, uuid::Uuid)| {
        let topic = FetchableTopicResponse::default();
        if by_id {
            topic.with_topic_id(*id)
        } else {
            topic.with_topic(topic_name(name.clone()))
        }
    };
    let refused = |code: i16| {
        let responses = keys
            .iter()
            .zip(&indexes)
            .map(|(key, partitions)| {
                topic(key).with_partitions(partitions.iter().map(|&index| fetch_error(index, code)).collect())
            })
            .collect();
        FetchResponse::default().with_error_code(if version >= 7 { code } else { 0 }).with_responses(responses)
    };
    match (request.session_id, request.session_epoch) {
        (0, -1 | 0) => {}
        (0, _) => return refused(INVALID_FETCH_SESSION_EPOCH),
        (_, _) => return refused(FETCH_SESSION_ID_NOT_FOUND),
    }
    let Some(isolation) = isolation(request.isolation_level) else {
        return refused(kafka_code(ErrorCode::InvalidRequest));
    };
    let input = svc::FetchRequest {
        max_wait_ms: non_negative(request.max_wait_ms),
        isolation,
        // KIP-74: the first batch is returned even when larger; 0 would mean "the default".
        max_bytes: non_negative(request.max_bytes).max(1),
        topics: request
            .topics
            .into_iter()
            .map(|t| svc::FetchTopic {
                topic: t.topic.0.to_string(),
                // From v13 the id alone names the topic (a nil id names none).
                topic_id: if by_id { Bytes::copy_from_slice(t.topic_id.as_bytes()) } else { Bytes::new() },
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| svc::FetchPartition {
                        partition: partition_index(p.partition),
                        offset: p.fetch_offset,
                        max_bytes: non_negative(p.partition_max_bytes).max(1),
                        current_leader_epoch: (p.current_leader_epoch >= 0).then_some(p.current_leader_epoch),
                    })
                    .collect(),
            })
            .collect(),
    };
    let answers = match service.fetch(ctx, input).await {
        Ok(answers) => answers,
        Err(e) => return refused(errors::request_error(&e)),
    };
    let names = answers.iter().map(|t| t.topic.clone()).collect();
    let mut hints = LeaderHints::new(service, LeaderHints::for_fetch(version));
    let responses = per_partition(Ok(answers), names, &indexes)
        .into_iter()
        .zip(&keys)
        .map(|((name, partitions), key)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, answer)| {
                    let hint = answer.as_ref().err().and_then(|refusal| hints.hint(&name, index, refusal));
                    let response = fetched(index, answer, isolation);
                    match hint {
                        Some(h) => response.with_current_leader(
                            FetchLeader::default().with_leader_id(h.leader_id).with_leader_epoch(h.leader_epoch),
                        ),
                        None => response,
                    }
                })
                .collect();
            topic(key).with_partitions(partitions)
        })
        .collect();
    let endpoints = hints
        .endpoints
        .into_iter()
        .map(|(id, host, port)| {
            FetchEndpoint::default().with_node_id(id).with_host(StrBytes::from_string(host)).with_port(port)
        })
        .collect();
    FetchResponse::default().with_session_id(0).with_responses(responses).with_node_endpoints(endpoints)
}

/// A partition's fetch answer carrying Kafka's `code`.
fn fetch_error(index: i32, code: i16) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(code)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(Bytes::new()))
}

/// One partition's fetch answer: its batches as one record set, each batch's offset and leader
/// epoch written in; for `read_committed`, the aborted transactions among them.
fn fetched(index: i32, answer: Answer<FetchOutcome>, isolation: Isolation) -> PartitionData {
    let out = match answer {
        Ok(out) => out,
        Err(refusal) => return fetch_error(index, errors::code(&refusal)),
    };
    let aborted = (isolation == Isolation::ReadCommitted).then(|| {
        out.aborted
            .iter()
            .map(|a| {
                AbortedTransaction::default()
                    .with_producer_id(ProducerId(a.producer_id))
                    .with_first_offset(offset(a.first_offset))
            })
            .collect()
    });
    PartitionData::default()
        .with_partition_index(index)
        .with_high_watermark(offset(out.high_watermark))
        .with_last_stable_offset(offset(out.last_stable_offset))
        .with_log_start_offset(offset(out.log_start_offset))
        .with_aborted_transactions(aborted)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(record_set(&out.batches)))
}

/// The batches as Kafka's record set: concatenated, each with `baseOffset` set to the offset it
/// is stored at and `partitionLeaderEpoch` to the term it was appended in. The producer wrote
/// neither (it sends offset 0 and epoch -1), and clients check both: the offsets to place the
/// records, the epoch to detect log truncation after a leader change (KIP-320).
pub fn record_set(batches: &[StoredBatch]) -> Bytes {
    let mut out = BytesMut::with_capacity(batches.iter().map(|b| b.data.len()).sum());
    for b in batches {
        let start = out.len();
        out.put_slice(&b.data);
        let batch = &mut out[start..];
        if batch.len() >= LEADER_EPOCH_AT + 4 {
            batch[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&offset(b.base_offset).to_be_bytes());
            let epoch = i32::try_from(b.leader_epoch).unwrap_or(i32::MAX);
            batch[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&epoch.to_be_bytes());
        }
    }
    out.freeze()
}

/// `ListOffsets`, versions 1 to 8: the log start (-2, and -4), the end a reader at the
/// request's isolation level may reach (-1), the record with the largest timestamp (-3), or the
/// first record whose own timestamp is at or after the one given (see `spec`).
pub async fn list_offsets(
    service: &Service,
    ctx: &RequestContext,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let Some(isolation) = isolation(request.isolation_level) else {
        let code = kafka_code(ErrorCode::InvalidRequest);
        let topics = request
            .topics
            .into_iter()
            .map(|t| {
                let partitions = t.partitions.iter().map(|p| listed_error(p.partition_index, code)).collect();
                ListOffsetsTopicResponse::default().with_name(t.name).with_partitions(partitions)
            })
            .collect();
        return ListOffsetsResponse::default().with_topics(topics);
    };
    let indexes: Vec<Vec<i32>> =
        request.topics.iter().map(|t| t.partitions.iter().map(|p| p.partition_index).collect()).collect();
    let names: Vec<String> = request.topics.iter().map(|t| t.name.0.to_string()).collect();
    let topics = request
        .topics
        .into_iter()
        .map(|t| svc::ListOffsetsTopic {
            topic: t.name.0.to_string(),
            partitions: t
                .partitions
                .into_iter()
                .map(|p| (partition_index(p.partition_index), spec(p.timestamp)))
                .collect(),
        })
        .collect();
    let answers = service.list_offsets(ctx, isolation, topics).await;
    let topics = per_partition(answers, names, &indexes)
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions.into_iter().map(|(index, answer)| listed(index, answer, version)).collect();
            ListOffsetsTopicResponse::default().with_name(topic_name(name)).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

fn listed_error(index: i32, code: i16) -> ListOffsetsPartitionResponse {
    ListOffsetsPartitionResponse::default()
        .with_partition_index(index)
        .with_error_code(code)
        .with_timestamp(-1)
        .with_offset(-1)
        .with_leader_epoch(-1)
}

/// What `ListOffsets`' timestamp asks for: -2 the log start, -1 the end the isolation level
/// reads to, -3 the record with the largest timestamp (v7), -4 the local log start (v8: every
/// record is local, so the log start), anything else the first record at or after that time.
fn spec(timestamp: i64) -> OffsetSpec {
    match timestamp {
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => OffsetSpec::Earliest,
        LATEST_TIMESTAMP => OffsetSpec::Latest,
        MAX_TIMESTAMP => OffsetSpec::MaxTimestamp,
        time => OffsetSpec::RecordTimestamp(time),
    }
}

/// One partition's listed offset: a search that found nothing answers offset and timestamp
/// -1, as Kafka does. The leader epoch is the listed record's (the leader's own for the end),
/// -1 when unknown, which tells a client to skip its truncation check for this offset (and
/// before version 4, which has no such field).
fn listed(index: i32, answer: Answer<ListedOffset>, version: i16) -> ListOffsetsPartitionResponse {
    const LEADER_EPOCH_FROM: i16 = 4;
    match answer {
        Ok(found) => ListOffsetsPartitionResponse::default()
            .with_partition_index(index)
            .with_timestamp(found.timestamp_ms.unwrap_or(-1))
            .with_offset(found.offset.map_or(-1, offset))
            .with_leader_epoch(match found.leader_epoch {
                Some(epoch) if version >= LEADER_EPOCH_FROM => i32::try_from(epoch).unwrap_or(i32::MAX),
                _ => -1,
            }),
        Err(refusal) => listed_error(index, errors::code(&refusal)),
    }
}

/// `InitProducerId`, versions 0 to 4: an idempotent producer's id (any node answers), or a
/// transactional id's producer with its epoch bumped (its coordinator answers). From version 3
/// the producer may name the id and epoch it has (KIP-360).
pub async fn init_producer_id(
    service: &Service,
    ctx: &RequestContext,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let current = (request.producer_id.0 >= 0 || request.producer_epoch >= 0)
        .then_some((request.producer_id.0, i32::from(request.producer_epoch)));
    let input = svc::InitProducerIdRequest {
        transactional_id: request.transactional_id.map(|t| t.0.to_string()).unwrap_or_default(),
        // A negative timeout is out of every range the coordinator accepts.
        transaction_timeout_ms: u32::try_from(request.transaction_timeout_ms).unwrap_or(u32::MAX),
        current,
    };
    match service.init_producer_id(ctx, input).await {
        Ok((producer_id, epoch)) => {
            InitProducerIdResponse::default().with_producer_id(ProducerId(producer_id)).with_producer_epoch(epoch)
        }
        Err(refusal) => InitProducerIdResponse::default()
            .with_error_code(errors::code(&refusal))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    }
}

/// Each partition's answer under the index the request gave it.
type PartitionAnswers<T> = Vec<(i32, Answer<T>)>;

/// The service's answers regrouped under the request's topic names and partition indexes (a
/// negative index was looked up as [`partition_index`] makes it, and is echoed as sent). A
/// request refused as a whole answers each partition with its code.
/// `OffsetForLeaderEpoch`, versions 2 to 4 (KIP-320): where each asked leader epoch ended, so
/// a consumer can check that the log it read was not truncated. Read on each partition's
/// leader; an epoch newer than the leader's, or none, answers epoch and offset -1 (Kafka's
/// undefined ones). Brokers' own requests (`replica_id` ≥ 0) are served alike: Rill's replicas
/// never send them.
pub fn offset_for_leader_epoch(
    service: &Service,
    ctx: &RequestContext,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let indexes: Vec<Vec<i32>> =
        request.topics.iter().map(|t| t.partitions.iter().map(|p| p.partition).collect()).collect();
    let names: Vec<String> = request.topics.iter().map(|t| t.topic.0.to_string()).collect();
    let topics = request
        .topics
        .into_iter()
        .map(|t| svc::EpochQueryTopic {
            topic: t.topic.0.to_string(),
            partitions: t
                .partitions
                .iter()
                .map(|p| svc::EpochQuery {
                    partition: partition_index(p.partition),
                    current_leader_epoch: (p.current_leader_epoch >= 0).then_some(p.current_leader_epoch),
                    leader_epoch: p.leader_epoch,
                })
                .collect(),
        })
        .collect();
    let answers = service.offsets_for_leader_epochs(ctx, topics);
    let topics = per_partition(answers, names, &indexes)
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, answer)| {
                    let (code, (epoch, end)) = match answer {
                        Ok(Some((epoch, end))) => (0, (i32::try_from(epoch).unwrap_or(i32::MAX), offset(end))),
                        Ok(None) => (0, (-1, -1)),
                        Err(refusal) => (errors::code(&refusal), (-1, -1)),
                    };
                    EpochEndOffset::default()
                        .with_partition(index)
                        .with_error_code(code)
                        .with_leader_epoch(epoch)
                        .with_end_offset(end)
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(topic_name(name)).with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

fn per_partition<T>(
    answers: Result<Answers<T>, RequestError>,
    names: Vec<String>,
    indexes: &[Vec<i32>],
) -> Vec<(String, PartitionAnswers<T>)> {
    match answers {
        Ok(answers) => answers
            .into_iter()
            .zip(indexes)
            .map(|(t, indexes)| {
                let partitions = t.partitions.into_iter().zip(indexes).map(|((_, answer), &index)| (index, answer));
                (t.topic, partitions.collect())
            })
            .collect(),
        Err(e) => {
            let refusal = errors::request_refusal(&e);
            names
                .into_iter()
                .zip(indexes)
                .map(|(name, indexes)| (name, indexes.iter().map(|&index| (index, Err(refusal.clone()))).collect()))
                .collect()
        }
    }
}

/// `DeleteRecords`, versions 0 to 2: each partition's records below its offset deleted on its
/// leader (offset -1: below the high watermark), answered with the new log start (Kafka's
/// `low_watermark`) once the deletion is committed, or with its own code.
pub async fn delete_records(
    service: &Service,
    ctx: &RequestContext,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let indexes: Vec<Vec<i32>> =
        request.topics.iter().map(|t| t.partitions.iter().map(|p| p.partition_index).collect()).collect();
    let names: Vec<String> = request.topics.iter().map(|t| t.name.0.to_string()).collect();
    let topics = request
        .topics
        .into_iter()
        .map(|t| svc_topics::DeleteRecordsTopic {
            topic: t.name.0.to_string(),
            topic_id: Bytes::new(),
            partitions: t.partitions.into_iter().map(|p| (partition_index(p.partition_index), p.offset)).collect(),
        })
        .collect();
    let answers = service.delete_records(ctx, non_negative(request.timeout_ms), topics).await;
    let topics = per_partition(answers, names, &indexes)
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, answer)| {
                    let result = DeleteRecordsPartitionResult::default().with_partition_index(index);
                    match answer {
                        Ok(start) => result.with_low_watermark(offset(start)),
                        Err(refusal) => result.with_low_watermark(-1).with_error_code(errors::code(&refusal)),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(topic_name(name)).with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
