//! The transaction APIs: `AddPartitionsToTxn` (the client versions, 0 to 3), `AddOffsetsToTxn`,
//! `EndTxn`, `TxnOffsetCommit`, `DescribeTransactions` and `ListTransactions`. Each is one call of
//! the service function the gRPC handler calls, on the same coordinator: a Kafka client's
//! transaction is the same transaction a gRPC producer's would be, with the same markers, the
//! same fencing and the same `read_committed` view.
//!
//! Both transaction protocols are spoken, told apart by the request's version as Kafka's
//! brokers do. Version 1 (librdkafka, kafka-python, Java before 4.0): partitions and groups are
//! added with `AddPartitionsToTxn` and `AddOffsetsToTxn` before they are written to. Version 2
//! (KIP-890 part 2; a client that reads `transaction.version` 2 from `ApiVersions`, the Java
//! client from 4.0): `Produce` v12 adds a partition with its first batch, `TxnOffsetCommit` v5
//! adds the group with its first commit, and `EndTxn` v5 bumps the epoch at every end and
//! answers the pair to go on with — a new producer id at epoch 0 once the epoch is worn out.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use rill_coordinator::transactions::TxnState;

use super::cluster::topic_name;
use super::errors;
use super::groups::{commit_answers, commit_topics, WireCommit};
use super::wire::{partition_index, str_bytes, text};
use crate::service::checks::NamedPartitions;
use crate::service::groups::TxnCommit;
use crate::service::transactions::{ListTransactionsFilter, TxnProducer};
use crate::service::{RequestContext, Service};

/// The transaction protocol of a client that adds partitions and groups explicitly: every
/// `AddPartitionsToTxn` and `AddOffsetsToTxn`, and `EndTxn` and `TxnOffsetCommit` before v5.
const TRANSACTION_VERSION_1: u32 = 1;

/// The transaction protocol an `EndTxn` or `TxnOffsetCommit` at `version` speaks: 2 from v5.
fn transaction_version(version: i16) -> u32 {
    if version >= 5 {
        2
    } else {
        TRANSACTION_VERSION_1
    }
}

fn producer(transactional_id: &TransactionalId, producer_id: ProducerId, epoch: i16) -> TxnProducer {
    TxnProducer {
        transactional_id: text(transactional_id),
        producer_id: producer_id.0,
        producer_epoch: i32::from(epoch),
    }
}

/// `AddPartitionsToTxn`, versions 0 to 3 (the ones clients send; 4 and later are brokers'
/// batched verification, which Rill's coordinators do among themselves). The service adds all
/// the partitions or none, so one refusal is every partition's code.
pub async fn add_partitions_to_txn(
    service: &Service,
    ctx: &RequestContext,
    request: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let asked: Vec<(String, Vec<i32>)> =
        request.v3_and_below_topics.iter().map(|t| (t.name.0.to_string(), t.partitions.clone())).collect();
    let topics = asked
        .iter()
        .map(|(topic, partitions)| NamedPartitions {
            topic: topic.clone(),
            partitions: partitions.iter().map(|&p| partition_index(p)).collect(),
        })
        .collect();
    let txn = producer(
        &request.v3_and_below_transactional_id,
        request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch,
    );
    let code = match service.add_partitions_to_txn(ctx, txn, topics).await {
        Ok(Ok(())) => 0,
        Ok(Err(refusal)) => errors::code(&refusal),
        Err(e) => errors::request_error(&e),
    };
    let results = asked
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default().with_partition_index(p).with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(topic_name(name)).with_results_by_partition(partitions)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
}

/// `AddOffsetsToTxn`, versions 0 to 4: the group joins the transaction, so `TxnOffsetCommit` may
/// commit its offsets in it.
pub async fn add_offsets_to_txn(
    service: &Service,
    ctx: &RequestContext,
    request: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let txn = producer(&request.transactional_id, request.producer_id, request.producer_epoch);
    let answer = service.add_offsets_to_txn(ctx, txn, &request.group_id.0, TRANSACTION_VERSION_1).await;
    AddOffsetsToTxnResponse::default().with_error_code(answer.err().map_or(0, |r| errors::code(&r)))
}

/// `EndTxn`, versions 0 to 5: commits or aborts; answered once the decision is committed (the
/// markers follow in the background, and `read_committed` readers wait for them). From v5
/// (transactions v2) the answer names the producer id and epoch to go on with; a refusal
/// leaves them at -1.
pub async fn end_txn(service: &Service, ctx: &RequestContext, request: EndTxnRequest, version: i16) -> EndTxnResponse {
    let txn = producer(&request.transactional_id, request.producer_id, request.producer_epoch);
    match service.end_txn(ctx, txn, request.committed, transaction_version(version)).await {
        Ok(next) => {
            EndTxnResponse::default().with_producer_id(ProducerId(next.producer_id)).with_producer_epoch(next.epoch)
        }
        Err(refusal) => EndTxnResponse::default().with_error_code(errors::code(&refusal)),
    }
}

/// `TxnOffsetCommit`, versions 0 to 5: offsets committed in the transaction (pending until its
/// marker), each partition answered on its own. From version 3 a classic member commits under
/// its generation; before, or with generation -1, the commit is not fenced by membership. From
/// version 5 (transactions v2) the commit adds the group to the transaction itself.
pub async fn txn_offset_commit(
    service: &Service,
    ctx: &RequestContext,
    request: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let (topics, names, indexes) = commit_topics(request.topics.into_iter().map(|t| {
        let partitions = t.partitions.into_iter().map(|p| WireCommit {
            index: p.partition_index,
            offset: p.committed_offset,
            metadata: p.committed_metadata,
            leader_epoch: p.committed_leader_epoch,
        });
        (t.name, partitions.collect())
    }));
    let commit = TxnCommit {
        transactional_id: text(&request.transactional_id),
        producer_id: request.producer_id.0,
        producer_epoch: i32::from(request.producer_epoch),
        transaction_version: transaction_version(version),
        group_id: request.group_id.0.to_string(),
        member_id: text(&request.member_id),
        generation_id: request.generation_id,
        topics,
    };
    let committed = service.txn_commit_offsets(ctx, commit).await;
    let topics = commit_answers(
        committed,
        names,
        &indexes,
        |index, code| TxnOffsetCommitResponsePartition::default().with_partition_index(index).with_error_code(code),
        |name, partitions| TxnOffsetCommitResponseTopic::default().with_name(name).with_partitions(partitions),
    );
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// `DescribeTransactions`, version 0: each id described by its coordinator (a request for an id
/// another node coordinates answers `NOT_COORDINATOR`; the admin client asks each id's
/// coordinator).
pub async fn describe_transactions(
    service: &Service,
    ctx: &RequestContext,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let ids: Vec<String> = request.transactional_ids.iter().map(|id| text(id)).collect();
    let described = match service.describe_transactions(ctx, &ids).await {
        Ok(described) => described,
        // Refused as a whole (too many ids): each id answers with the refusal's code.
        Err(e) => ids.into_iter().map(|id| (id, Err(errors::request_refusal(&e)))).collect(),
    };
    let states = described
        .into_iter()
        .map(|(id, answer)| {
            let state = TransactionState::default().with_transactional_id(TransactionalId(str_bytes(id)));
            match answer {
                Ok(record) => state
                    .with_transaction_state(str_bytes(record.state.name().to_string()))
                    .with_transaction_timeout_ms(i32::try_from(record.timeout_ms).unwrap_or(i32::MAX))
                    .with_transaction_start_time_ms(if record.state.is_open() { record.txn_start_ms } else { -1 })
                    .with_producer_id(ProducerId(record.producer_id))
                    .with_producer_epoch(record.epoch)
                    .with_topics(
                        record
                            .partitions
                            .into_iter()
                            .map(|(topic, ps)| {
                                TopicData::default()
                                    .with_topic(topic_name(topic))
                                    .with_partitions(ps.into_iter().filter_map(|p| i32::try_from(p).ok()).collect())
                            })
                            .collect(),
                    ),
                Err(refusal) => state
                    .with_error_code(errors::code(&refusal))
                    .with_transaction_state(str_bytes(String::new()))
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_transaction_start_time_ms(-1),
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// `ListTransactions`, versions 0 and 1: the transactions of the coordinator partitions this
/// node leads (the admin client asks every node), filtered by state, producer id and (v1) how
/// long they have been open. State names Rill does not have are echoed as unknown and match
/// nothing.
pub async fn list_transactions(
    service: &Service,
    ctx: &RequestContext,
    request: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let states: Vec<String> = request.state_filters.iter().map(text).collect();
    let unknown = states.iter().filter(|s| TxnState::from_name(s).is_none()).cloned().map(str_bytes).collect();
    let filter = ListTransactionsFilter {
        states,
        producer_ids: request.producer_id_filters.iter().map(|p| p.0).collect(),
        open_longer_than_ms: request.duration_filter,
    };
    let response = ListTransactionsResponse::default().with_unknown_state_filters(unknown);
    match service.list_transactions(ctx, filter).await {
        Ok(Ok(listed)) => response.with_transaction_states(
            listed
                .into_iter()
                .map(|t| {
                    ListedTransaction::default()
                        .with_transactional_id(TransactionalId(str_bytes(t.transactional_id)))
                        .with_producer_id(ProducerId(t.producer_id))
                        .with_transaction_state(str_bytes(t.state))
                })
                .collect(),
        ),
        Ok(Err(refusal)) => response.with_error_code(errors::code(&refusal)),
        Err(e) => response.with_error_code(errors::request_error(&e)),
    }
}
