//! Verifying a transactional batch before its partition's leader appends it (KIP-890 part 1):
//! the leader asks the transactional id's coordinator whether the partition is in the
//! producer's ongoing transaction (v1), or to add it (v2). Directly when the coordinator is this
//! node, else through the coordinator's internal `Cluster.AddTxnPartition`.
//!
//! The answer is mapped to the partition's errors here, in one place: a fenced producer is
//! `INVALID_PRODUCER_EPOCH`, a partition not in the transaction `INVALID_TXN_STATE`, a busy
//! coordinator `CONCURRENT_TRANSACTIONS`, an unreachable one `COORDINATOR_NOT_AVAILABLE`.

use std::sync::Arc;
use std::time::Duration;

use rill_broker::PartitionError;
use rill_coordinator::transactions;
use rill_coordinator::CoordinatorError;
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;
use rill_proto::internal::{AddTxnPartitionRequest, AddTxnPartitionResponse};

use crate::errors;
use crate::node::{Hosted, Node};

/// How long the coordinator may take to answer.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// What the partition leader asks.
#[derive(Debug, Clone)]
pub struct Verify {
    /// The producer's transactional id.
    pub transactional_id: String,
    /// Its producer id and epoch (from the batch).
    pub producer: (i64, i16),
    /// The partition.
    pub topic: String,
    /// See `topic`.
    pub partition: u32,
    /// v1: only check; v2: add the partition.
    pub verify_only: bool,
}

/// Asks the coordinator of `v.transactional_id`.
pub async fn verify(node: &Arc<Node>, v: Verify) -> Result<(), PartitionError> {
    let Some((_, group)) = node.coordinator_partition(PartitionKind::TransactionState, &v.transactional_id) else {
        return Err(PartitionError::CoordinatorNotAvailable("the transaction state topic does not exist yet".into()));
    };
    if let Some(Hosted::Transactions(p)) = node.replica(group) {
        if p.replica().state().is_leader {
            let answer = serve_local(&p, &v).await;
            return answer.map_err(|e| from_coordinator(&e));
        }
    }
    let leader = node
        .leader_of(group)
        .ok_or_else(|| PartitionError::CoordinatorNotAvailable("the coordinator has no leader yet".into()))?;
    let mut client = node
        .cluster_client(leader)
        .ok_or_else(|| PartitionError::CoordinatorNotAvailable(format!("no address for node {leader}")))?;
    let request = AddTxnPartitionRequest {
        from_node: node.id(),
        transactional_id: v.transactional_id,
        producer_id: v.producer.0,
        producer_epoch: i32::from(v.producer.1),
        topic: v.topic,
        partition: v.partition,
        verify_only: v.verify_only,
    };
    let answer = rill_rt::timeout(VERIFY_TIMEOUT, client.add_txn_partition(request))
        .await
        .map_err(|_| PartitionError::CoordinatorNotAvailable(format!("node {leader} did not answer in time")))?
        .map_err(|s| PartitionError::CoordinatorNotAvailable(s.message().to_string()))?
        .into_inner();
    from_wire(answer)
}

async fn serve_local(
    p: &rill_broker::StatePartition<rill_coordinator::TransactionsMachine>,
    v: &Verify,
) -> Result<(), CoordinatorError> {
    transactions::verify_partition(
        p,
        &v.transactional_id,
        v.producer,
        &v.topic,
        v.partition,
        v.verify_only,
        VERIFY_TIMEOUT,
    )
    .await
}

/// `Cluster.AddTxnPartition` on the coordinator's node.
pub async fn serve(node: &Arc<Node>, req: AddTxnPartitionRequest) -> AddTxnPartitionResponse {
    let answer = |e: errors::WireError| AddTxnPartitionResponse { error_code: e.code as i32, error_message: e.message };
    let Ok(epoch) = i16::try_from(req.producer_epoch) else {
        return answer(errors::WireError::new(ErrorCode::InvalidRequest, "producer epoch beyond 16 bits"));
    };
    let p = match crate::api::routing::coordinator_here(node, PartitionKind::TransactionState, &req.transactional_id) {
        Ok(Hosted::Transactions(p)) => p,
        Ok(_) => return answer(errors::coordinator_not_created(rill_meta::TRANSACTION_STATE_TOPIC)),
        Err(e) => return answer(e),
    };
    let v = Verify {
        transactional_id: req.transactional_id,
        producer: (req.producer_id, epoch),
        topic: req.topic,
        partition: req.partition,
        verify_only: req.verify_only,
    };
    match serve_local(&p, &v).await {
        Ok(()) => AddTxnPartitionResponse::default(),
        Err(e) => answer(errors::coordinator(&e)),
    }
}

/// The partition's error for a coordinator's refusal.
fn from_coordinator(e: &CoordinatorError) -> PartitionError {
    from_wire(AddTxnPartitionResponse { error_code: errors::coordinator(e).code as i32, error_message: e.to_string() })
        .err()
        .unwrap_or_else(|| PartitionError::CoordinatorNotAvailable(e.to_string()))
}

/// The partition's error for the coordinator's answer (`Ok` for none).
fn from_wire(a: AddTxnPartitionResponse) -> Result<(), PartitionError> {
    let message = a.error_message;
    match ErrorCode::try_from(a.error_code).unwrap_or(ErrorCode::UnknownServerError) {
        ErrorCode::None => Ok(()),
        ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch | ErrorCode::InvalidProducerIdMapping => {
            Err(PartitionError::TransactionFenced(message))
        }
        ErrorCode::InvalidTxnState => Err(PartitionError::InvalidTxnState(message)),
        ErrorCode::ConcurrentTransactions => Err(PartitionError::ConcurrentTransactions(message)),
        ErrorCode::InvalidRequest => Err(PartitionError::InvalidRequest(message)),
        _ => Err(PartitionError::CoordinatorNotAvailable(message)),
    }
}
