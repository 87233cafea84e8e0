//! The public `Transactions` service: adding partitions to a transaction, ending it, and
//! describing transactional ids, served by each id's coordinator (the leader of the
//! `__transaction_state` partition the id hashes to). The markers an `EndTxn` calls for are
//! written by [`crate::txn_markers`].

use std::sync::Arc;
use std::time::Duration;

use rill_broker::StatePartition;
use rill_coordinator::groups::TopicPartitions;
use rill_coordinator::transactions::{self, TxnProtocol};
use rill_coordinator::{CoordinatorError, TransactionsMachine};
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;
use rill_proto::transactions::transactions_server::Transactions;
use rill_proto::transactions::{
    AbortTransactionRequest, AbortTransactionResponse, AddOffsetsToTxnRequest, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest,
    EndTxnResponse, ListTransactionsRequest, ListTransactionsResponse, TransactionDescription, TransactionListing,
    TxnTopic,
};
use tonic::{Request, Response, Status};

use crate::api::authz::{rpc, Authorization, ResourceType};
use crate::api::limits;
use crate::api::routing::coordinator_here;
use crate::errors::{self, WireError};
use crate::node::{Hosted, Node};

/// How long a coordinator's decision may take to be committed.
const DECISION_TIMEOUT: Duration = Duration::from_secs(10);
/// Most transactional ids one `DescribeTransactions` names.
const MAX_DESCRIBED: usize = 1_000;
/// How long a coordinator may take to confirm with a quorum that it still leads before it
/// answers `DescribeTransactions` or `ListTransactions`.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The `Transactions` service.
pub struct TransactionsApi {
    node: Arc<Node>,
    authz: Authorization,
}

impl TransactionsApi {
    /// The service for `node`.
    pub fn new(node: Arc<Node>, authz: Authorization) -> Self {
        Self { node, authz }
    }

    /// The id's coordinator partition, when this node leads it, or the error to answer.
    fn coordinator(&self, transactional_id: &str) -> Result<Arc<StatePartition<TransactionsMachine>>, WireError> {
        transactions::validate(transactional_id, 0).map_err(|e| errors::coordinator(&e))?;
        match coordinator_here(&self.node, PartitionKind::TransactionState, transactional_id)? {
            Hosted::Transactions(p) => Ok(p),
            _ => Err(errors::coordinator_not_created(rill_meta::TRANSACTION_STATE_TOPIC)),
        }
    }

    /// The partitions a request names, checked against the metadata: every topic exists, is
    /// not internal, and has each partition; no partition appears twice.
    fn partitions(&self, topics: &[TxnTopic]) -> Result<TopicPartitions, WireError> {
        let mut out = TopicPartitions::new();
        for t in topics {
            let unknown = |what: String| WireError::new(ErrorCode::UnknownTopicOrPartition, what);
            let Some(meta) = self.node.topic(&t.topic) else {
                return Err(unknown(format!("topic {:?} does not exist", t.topic)));
            };
            if meta.is_internal() {
                return Err(WireError::new(
                    ErrorCode::InvalidTopic,
                    format!("{:?} is an internal topic: transactions write to record topics only", t.topic),
                ));
            }
            let set = out.entry(t.topic.clone()).or_default();
            for &p in &t.partitions {
                if p as usize >= meta.partitions.len() {
                    return Err(unknown(format!("topic {:?} has no partition {p}", t.topic)));
                }
                if !set.insert(p) {
                    return Err(errors::duplicate_partition(&t.topic, p));
                }
            }
        }
        Ok(out)
    }
}

/// A request's producer epoch, checked to fit Kafka's 16 bits.
fn epoch(producer_epoch: i32) -> Result<i16, WireError> {
    i16::try_from(producer_epoch).ok().filter(|e| *e >= 0).ok_or_else(|| {
        WireError::new(ErrorCode::InvalidRequest, format!("producer epoch {producer_epoch} is not a 16-bit epoch"))
    })
}

/// A request's transaction protocol version: 0 or 1 (v1), or 2.
fn protocol(version: u32) -> Result<TxnProtocol, WireError> {
    match version {
        0 | 1 => Ok(TxnProtocol::V1),
        2 => Ok(TxnProtocol::V2),
        v => Err(WireError::new(ErrorCode::InvalidRequest, format!("unknown transaction version {v}: 1 or 2"))),
    }
}

fn add_error(e: WireError) -> AddPartitionsToTxnResponse {
    AddPartitionsToTxnResponse { error_code: e.code as i32, error_message: e.message, coordinator: e.leader }
}

fn end_error(e: WireError) -> EndTxnResponse {
    EndTxnResponse {
        error_code: e.code as i32,
        error_message: e.message,
        producer_id: -1,
        producer_epoch: -1,
        coordinator: e.leader,
    }
}

#[tonic::async_trait]
impl Transactions for TransactionsApi {
    async fn add_partitions_to_txn(
        &self,
        request: Request<AddPartitionsToTxnRequest>,
    ) -> Result<Response<AddPartitionsToTxnResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        let count = req.topics.iter().map(|t| t.partitions.len()).sum();
        limits::check_counts("AddPartitionsToTxn", req.topics.len(), count)?;
        self.authz.authorize(&principal, rpc::ADD_PARTITIONS_TO_TXN, &req)?;
        let answer = async {
            let epoch = epoch(req.producer_epoch)?;
            let partitions = self.partitions(&req.topics)?;
            let coordinator = self.coordinator(&req.transactional_id)?;
            let producer = (req.producer_id, epoch);
            transactions::add_partitions(
                self.node.txn_additions(),
                &coordinator,
                &req.transactional_id,
                producer,
                &partitions,
                TxnProtocol::V1,
                DECISION_TIMEOUT,
            )
            .await
            .map_err(|e| errors::coordinator(&e))
        };
        Ok(Response::new(match answer.await {
            Ok(()) => AddPartitionsToTxnResponse::default(),
            Err(e) => add_error(e),
        }))
    }

    async fn add_offsets_to_txn(
        &self,
        request: Request<AddOffsetsToTxnRequest>,
    ) -> Result<Response<AddPartitionsToTxnResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        self.authz.authorize(&principal, rpc::ADD_OFFSETS_TO_TXN, &req)?;
        let answer = async {
            let epoch = epoch(req.producer_epoch)?;
            let protocol = protocol(req.transaction_version)?;
            let coordinator = self.coordinator(&req.transactional_id)?;
            let producer = (req.producer_id, epoch);
            transactions::add_offsets(
                self.node.txn_additions(),
                &coordinator,
                &req.transactional_id,
                producer,
                &req.group_id,
                protocol,
                DECISION_TIMEOUT,
            )
            .await
            .map_err(|e| errors::coordinator(&e))
        };
        Ok(Response::new(match answer.await {
            Ok(()) => AddPartitionsToTxnResponse::default(),
            Err(e) => add_error(e),
        }))
    }

    async fn end_txn(&self, request: Request<EndTxnRequest>) -> Result<Response<EndTxnResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        self.authz.authorize(&principal, rpc::END_TXN, &req)?;
        let answer = async {
            let epoch = epoch(req.producer_epoch)?;
            let coordinator = self.coordinator(&req.transactional_id)?;
            let producer = (req.producer_id, epoch);
            let protocol = protocol(req.transaction_version)?;
            let ended = transactions::end_transaction(
                &coordinator,
                &req.transactional_id,
                producer,
                req.commit,
                protocol,
                DECISION_TIMEOUT,
            )
            .await
            .map_err(|e| errors::coordinator(&e))?;
            if let Some(prepared) = ended.to_mark.clone() {
                self.node.txn_markers().finish(&self.node, coordinator, req.transactional_id.clone(), prepared);
            }
            Ok::<_, WireError>(ended)
        };
        Ok(Response::new(match answer.await {
            Ok(ended) => EndTxnResponse {
                producer_id: ended.producer_id,
                producer_epoch: i32::from(ended.epoch),
                ..EndTxnResponse::default()
            },
            Err(e) => end_error(e),
        }))
    }

    async fn describe_transactions(
        &self,
        request: Request<DescribeTransactionsRequest>,
    ) -> Result<Response<DescribeTransactionsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        if req.transactional_ids.len() > MAX_DESCRIBED {
            return Err(errors::too_many_entries_status(
                "DescribeTransactions",
                "transactional ids",
                req.transactional_ids.len(),
                MAX_DESCRIBED,
            ));
        }
        self.authz.authorize(&principal, rpc::DESCRIBE_TRANSACTIONS, &req)?;
        let transactions = self.describe(&req.transactional_ids).await;
        Ok(Response::new(DescribeTransactionsResponse { transactions }))
    }

    async fn list_transactions(
        &self,
        request: Request<ListTransactionsRequest>,
    ) -> Result<Response<ListTransactionsResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        if req.states.len() > 16 {
            return Err(errors::too_many_entries_status("ListTransactions", "states", req.states.len(), 16));
        }
        self.authz.authorize(&principal, rpc::LIST_TRANSACTIONS, &req)?;
        let now = rill_rt::wall_clock_ms();
        let mut transactions = Vec::new();
        // Only a leader answers for its partition (the client asks every leader), once a quorum
        // confirms it still leads; the partitions' confirmations run together. A replica that
        // is not the leader is left out; a leader that cannot answer fails the listing, which
        // would otherwise look complete without its transactions.
        let replicas = self.node.transactions_replicas();
        let reads = replicas.iter().map(|p| {
            transactions::read(p, READ_TIMEOUT, |state| {
                state
                    .iter()
                    .map(|(id, r)| {
                        let open = r.state == transactions::TxnState::Ongoing || r.state.is_prepared();
                        TransactionListing {
                            transactional_id: id.clone(),
                            state: r.state.name().to_string(),
                            producer_id: r.producer_id,
                            producer_epoch: i32::from(r.epoch),
                            open_ms: if open { now.saturating_sub(r.txn_start_ms).max(0) } else { -1 },
                            partitions: r.partitions.values().map(|ps| ps.len() as u32).sum(),
                        }
                    })
                    .collect::<Vec<_>>()
            })
        });
        for listed in futures::future::join_all(reads).await {
            let listed = match listed {
                Ok(listed) => listed,
                Err(CoordinatorError::NotCoordinator { .. }) => continue,
                Err(e) => {
                    let e = errors::coordinator(&e);
                    return Ok(Response::new(ListTransactionsResponse {
                        error_code: e.code as i32,
                        error_message: e.message,
                        ..ListTransactionsResponse::default()
                    }));
                }
            };
            transactions.extend(listed.into_iter().filter(|t| {
                (req.states.is_empty() || req.states.contains(&t.state))
                    && (req.open_longer_than_ms <= 0 || t.open_ms >= req.open_longer_than_ms)
                    && self.authz.lists(
                        &principal,
                        rpc::LIST_TRANSACTIONS,
                        ResourceType::TransactionalId,
                        &t.transactional_id,
                    )
            }));
        }
        transactions.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(Response::new(ListTransactionsResponse { transactions, ..ListTransactionsResponse::default() }))
    }

    async fn abort_transaction(
        &self,
        request: Request<AbortTransactionRequest>,
    ) -> Result<Response<AbortTransactionResponse>, Status> {
        let principal = self.authz.principal(&request);
        let req = request.into_inner();
        self.authz.authorize(&principal, rpc::ABORT_TRANSACTION, &req)?;
        let answer = async {
            let coordinator = self.coordinator(&req.transactional_id)?;
            let prepared = transactions::abort_open(&coordinator, &req.transactional_id, DECISION_TIMEOUT)
                .await
                .map_err(|e| errors::coordinator(&e))?;
            self.node.txn_markers().finish(&self.node, coordinator, req.transactional_id.clone(), prepared);
            Ok::<_, WireError>(())
        };
        Ok(Response::new(match answer.await {
            Ok(()) => AbortTransactionResponse::default(),
            Err(e) => {
                AbortTransactionResponse { error_code: e.code as i32, error_message: e.message, coordinator: e.leader }
            }
        }))
    }
}

impl TransactionsApi {
    /// Each of `ids` described, in order: read from its coordinator partition once this node's
    /// leadership of it is confirmed by a quorum (one confirmation per partition, all at once).
    async fn describe(&self, ids: &[String]) -> Vec<TransactionDescription> {
        let mut partitions: Vec<(Arc<StatePartition<TransactionsMachine>>, Vec<usize>)> = Vec::new();
        let mut described: Vec<Option<TransactionDescription>> = vec![None; ids.len()];
        for (i, id) in ids.iter().enumerate() {
            match self.coordinator(id) {
                Ok(c) => match partitions.iter_mut().find(|(p, _)| Arc::ptr_eq(p, &c)) {
                    Some((_, asked)) => asked.push(i),
                    None => partitions.push((c, vec![i])),
                },
                Err(e) => described[i] = Some(Self::description_failed(id, e)),
            }
        }
        let reads = partitions.iter().map(|(p, asked)| {
            transactions::read(p, READ_TIMEOUT, |state| {
                asked.iter().map(|&i| (i, state.get(&ids[i]).cloned())).collect::<Vec<_>>()
            })
        });
        for (read, (_, asked)) in futures::future::join_all(reads).await.into_iter().zip(&partitions) {
            match read {
                Ok(records) => {
                    for (i, record) in records {
                        described[i] = Some(match record {
                            Some(r) => Self::description(&ids[i], &r),
                            None => Self::description_failed(
                                &ids[i],
                                errors::coordinator(&CoordinatorError::TransactionalIdNotFound(ids[i].clone())),
                            ),
                        });
                    }
                }
                Err(e) => {
                    let e = errors::coordinator(&e);
                    for &i in asked {
                        described[i] = Some(Self::description_failed(&ids[i], e.clone()));
                    }
                }
            }
        }
        described.into_iter().flatten().collect()
    }

    fn description_failed(id: &str, e: WireError) -> TransactionDescription {
        TransactionDescription {
            transactional_id: id.to_string(),
            error_code: e.code as i32,
            error_message: e.message,
            coordinator: e.leader,
            ..TransactionDescription::default()
        }
    }

    fn description(id: &str, record: &transactions::TransactionMetadata) -> TransactionDescription {
        let open = matches!(record.state, transactions::TxnState::Ongoing) || record.state.is_prepared();
        TransactionDescription {
            transactional_id: id.to_string(),
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            state: record.state.name().to_string(),
            producer_id: record.producer_id,
            producer_epoch: i32::from(record.epoch),
            transaction_timeout_ms: record.timeout_ms,
            transaction_start_ms: if open { record.txn_start_ms } else { -1 },
            topics: record
                .partitions
                .iter()
                .map(|(topic, ps)| TxnTopic { topic: topic.clone(), partitions: ps.iter().copied().collect() })
                .collect(),
            protocol_version: record.protocol.to_proto(),
            coordinator: None,
        }
    }
}
