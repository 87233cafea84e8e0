//! The public `Transactions` service: adding partitions and groups to a transaction, ending it,
//! and describing, listing and aborting transactions — each decoded into a [`Service`] call and
//! its answer encoded.

use rill_coordinator::transactions::TransactionMetadata;
use rill_proto::common::ErrorCode;
use rill_proto::transactions::transactions_server::Transactions;
use rill_proto::transactions::{
    AbortTransactionRequest, AbortTransactionResponse, AddOffsetsToTxnRequest, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest,
    EndTxnResponse, ListTransactionsRequest, ListTransactionsResponse, TransactionDescription, TransactionListing,
    TxnTopic,
};
use tonic::{Request, Response, Status};

use crate::api::rules::{context, rpc};
use crate::api::{error_of, request_status};
use crate::service::checks::NamedPartitions;
use crate::service::transactions::{ListTransactionsFilter, TxnProducer};
use crate::service::{Answer, Service};

/// The `Transactions` service.
pub struct TransactionsApi {
    service: Service,
}

impl TransactionsApi {
    /// The service over `service`.
    pub fn new(service: Service) -> Self {
        Self { service }
    }
}

fn added(answer: Answer<()>) -> AddPartitionsToTxnResponse {
    let (error_code, error_message, coordinator) = error_of(&answer);
    AddPartitionsToTxnResponse { error_code, error_message, coordinator }
}

fn description(id: String, answer: Answer<TransactionMetadata>) -> TransactionDescription {
    match answer {
        Ok(record) => TransactionDescription {
            transactional_id: id,
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            state: record.state.name().to_string(),
            producer_id: record.producer_id,
            producer_epoch: i32::from(record.epoch),
            transaction_timeout_ms: record.timeout_ms,
            transaction_start_ms: if record.state.is_open() { record.txn_start_ms } else { -1 },
            topics: record
                .partitions
                .iter()
                .map(|(topic, ps)| TxnTopic { topic: topic.clone(), partitions: ps.iter().copied().collect() })
                .collect(),
            protocol_version: record.protocol.to_proto(),
            coordinator: None,
        },
        Err(e) => TransactionDescription {
            transactional_id: id,
            error_code: e.code as i32,
            error_message: e.message,
            coordinator: e.leader,
            ..TransactionDescription::default()
        },
    }
}

#[tonic::async_trait]
impl Transactions for TransactionsApi {
    async fn add_partitions_to_txn(
        &self,
        request: Request<AddPartitionsToTxnRequest>,
    ) -> Result<Response<AddPartitionsToTxnResponse>, Status> {
        let ctx = context(&request, rpc::ADD_PARTITIONS_TO_TXN)?;
        let req = request.into_inner();
        let producer = TxnProducer {
            transactional_id: req.transactional_id,
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
        };
        let topics =
            req.topics.into_iter().map(|t| NamedPartitions { topic: t.topic, partitions: t.partitions }).collect();
        let answer =
            self.service.add_partitions_to_txn(&ctx, producer, topics).await.map_err(|e| request_status(&e))?;
        Ok(Response::new(added(answer)))
    }

    async fn add_offsets_to_txn(
        &self,
        request: Request<AddOffsetsToTxnRequest>,
    ) -> Result<Response<AddPartitionsToTxnResponse>, Status> {
        let ctx = context(&request, rpc::ADD_OFFSETS_TO_TXN)?;
        let req = request.into_inner();
        let producer = TxnProducer {
            transactional_id: req.transactional_id,
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
        };
        let answer = self.service.add_offsets_to_txn(&ctx, producer, &req.group_id, req.transaction_version).await;
        Ok(Response::new(added(answer)))
    }

    async fn end_txn(&self, request: Request<EndTxnRequest>) -> Result<Response<EndTxnResponse>, Status> {
        let ctx = context(&request, rpc::END_TXN)?;
        let req = request.into_inner();
        let producer = TxnProducer {
            transactional_id: req.transactional_id,
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
        };
        let answer = self.service.end_txn(&ctx, producer, req.commit, req.transaction_version).await;
        Ok(Response::new(match answer {
            Ok(ended) => EndTxnResponse {
                producer_id: ended.producer_id,
                producer_epoch: i32::from(ended.epoch),
                ..EndTxnResponse::default()
            },
            Err(e) => EndTxnResponse {
                error_code: e.code as i32,
                error_message: e.message,
                producer_id: -1,
                producer_epoch: -1,
                coordinator: e.leader,
            },
        }))
    }

    async fn describe_transactions(
        &self,
        request: Request<DescribeTransactionsRequest>,
    ) -> Result<Response<DescribeTransactionsResponse>, Status> {
        let ctx = context(&request, rpc::DESCRIBE_TRANSACTIONS)?;
        let ids = request.into_inner().transactional_ids;
        let described = self.service.describe_transactions(&ctx, &ids).await.map_err(|e| request_status(&e))?;
        let transactions = described.into_iter().map(|(id, answer)| description(id, answer)).collect();
        Ok(Response::new(DescribeTransactionsResponse { transactions }))
    }

    async fn list_transactions(
        &self,
        request: Request<ListTransactionsRequest>,
    ) -> Result<Response<ListTransactionsResponse>, Status> {
        let ctx = context(&request, rpc::LIST_TRANSACTIONS)?;
        let req = request.into_inner();
        let filter = ListTransactionsFilter {
            states: req.states,
            producer_ids: Vec::new(),
            open_longer_than_ms: req.open_longer_than_ms,
        };
        let answer = self.service.list_transactions(&ctx, filter).await.map_err(|e| request_status(&e))?;
        let (error_code, error_message, _) = error_of(&answer);
        let transactions = answer
            .unwrap_or_default()
            .into_iter()
            .map(|t| TransactionListing {
                transactional_id: t.transactional_id,
                state: t.state,
                producer_id: t.producer_id,
                producer_epoch: i32::from(t.producer_epoch),
                open_ms: t.open_ms,
                partitions: t.partitions,
            })
            .collect();
        Ok(Response::new(ListTransactionsResponse { error_code, error_message, transactions }))
    }

    async fn abort_transaction(
        &self,
        request: Request<AbortTransactionRequest>,
    ) -> Result<Response<AbortTransactionResponse>, Status> {
        let ctx = context(&request, rpc::ABORT_TRANSACTION)?;
        let answer = self.service.abort_transaction(&ctx, &request.into_inner().transactional_id).await;
        let (error_code, error_message, coordinator) = error_of(&answer);
        Ok(Response::new(AbortTransactionResponse { error_code, error_message, coordinator }))
    }
}
