//! Verifying with a transactional id's coordinator before accepting a transactional write
//! (KIP-890 part 1): a partition leader about to append the first transactional batch of a
//! producer asks whether the partition is in the producer's ongoing transaction (v1), or to add
//! it (v2); a group coordinator about to accept a transactional offset commit asks whether the
//! group is in it (added by `AddOffsetsToTxn`). Directly when the transaction coordinator is
//! this node, else through its internal `Cluster.AddTxnPartition`.
//!
//! The answer is mapped to the partition's errors here, in one place: a fenced producer is
//! `INVALID_PRODUCER_EPOCH`, a partition not in the transaction `INVALID_TXN_STATE`, a busy
//! coordinator `CONCURRENT_TRANSACTIONS`, an unreachable one `COORDINATOR_NOT_AVAILABLE`. A
//! group coordinator answers the transaction coordinator's code as it is.

use std::sync::Arc;
use std::time::Duration;

use rill_broker::produce::{OwedMarker, Verified};
use rill_broker::PartitionError;
use rill_coordinator::CoordinatorError;
use rill_coordinator::{transactions, txn_offsets};
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;
use rill_proto::internal::{AddTxnPartitionRequest, AddTxnPartitionResponse, OwedTxnMarker};
use rill_records::{ControlKind, ControlMarker};

use crate::errors::{self, WireError};
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

/// What is verified to be in the transaction.
#[derive(Debug, Clone)]
enum Target {
    /// A partition (checked, or added with `add`).
    Partition { topic: String, partition: u32, add: bool },
    /// A consumer group (checked, or added with `add`).
    Group { group: String, add: bool },
}

/// Asks the coordinator of `v.transactional_id` about a partition: the transaction it is in,
/// named, and the marker the partition is still owed by the producer's previous transaction,
/// if any (v2).
pub async fn verify(node: &Arc<Node>, v: Verify) -> Result<Verified, PartitionError> {
    let target = Target::Partition { topic: v.topic, partition: v.partition, add: !v.verify_only };
    let answer = ask(node, &v.transactional_id, v.producer, target).await.map_err(to_partition)?;
    Ok(Verified { transaction: answer.transaction_start, owed: answer.owed.map(owed_from_proto).transpose()? })
}

/// What the coordinator answers: the transaction's name, and a partition's owed marker.
#[derive(Debug, Default)]
struct Answer {
    transaction_start: u64,
    owed: Option<OwedTxnMarker>,
}

fn owed_to_proto(owed: transactions::OwedMarker, coordinator_epoch: i32) -> OwedTxnMarker {
    OwedTxnMarker {
        commit: owed.commit,
        producer_epoch: i32::from(owed.producer_epoch),
        coordinator_epoch,
        transaction_start: owed.transaction,
    }
}

/// The owed marker's producer epoch, which must fit Kafka's 16 bits.
fn owed_epoch(o: &OwedTxnMarker) -> Result<i16, String> {
    i16::try_from(o.producer_epoch)
        .map_err(|_| format!("the transaction coordinator answered epoch {}", o.producer_epoch))
}

fn owed_from_proto(o: OwedTxnMarker) -> Result<OwedMarker, PartitionError> {
    let producer_epoch = owed_epoch(&o).map_err(PartitionError::CoordinatorNotAvailable)?;
    let kind = if o.commit { ControlKind::Commit } else { ControlKind::Abort };
    let marker = ControlMarker { kind, coordinator_epoch: o.coordinator_epoch, transaction: o.transaction_start };
    Ok(OwedMarker { marker, producer_epoch })
}

/// What a group coordinator learns about a transactional offset commit's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupVerified {
    /// The ongoing transaction the group is in, by name (the version of the coordinator's
    /// write that began it).
    pub transaction: u64,
    /// The marker the group is still owed by the producer's decided transaction (v2), applied
    /// ahead of the offsets.
    pub owed: Option<txn_offsets::TxnMarker>,
}

/// Asks the coordinator of `transactional_id` whether `group_id` is in the ongoing transaction
/// of `producer` (id, epoch) — or, with `add` (transactions v2), to add it; that transaction's
/// name when it is, and the marker the group is still owed by the producer's previous
/// transaction, if any.
pub async fn verify_group(
    node: &Arc<Node>,
    transactional_id: &str,
    producer: (i64, i16),
    group_id: &str,
    add: bool,
) -> Result<GroupVerified, WireError> {
    let answer = ask(node, transactional_id, producer, Target::Group { group: group_id.to_string(), add });
    let answer = answer.await.map_err(|e| match e.code {
        // The *transaction* coordinator moved: to the committer this is not its group
        // coordinator moving, only a coordinator it needs being briefly unavailable.
        ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoadInProgress => {
            WireError::new(ErrorCode::CoordinatorNotAvailable, e.message)
        }
        _ => e,
    })?;
    let owed = answer.owed.map(|o| group_marker_from_proto(o, producer.0)).transpose()?;
    Ok(GroupVerified { transaction: answer.transaction_start, owed })
}

fn group_marker_from_proto(o: OwedTxnMarker, producer_id: i64) -> Result<txn_offsets::TxnMarker, WireError> {
    let producer_epoch = owed_epoch(&o).map_err(|m| WireError::new(ErrorCode::CoordinatorNotAvailable, m))?;
    Ok(txn_offsets::TxnMarker {
        producer_id,
        producer_epoch,
        coordinator_epoch: o.coordinator_epoch,
        commit: o.commit,
        transaction_start: o.transaction_start,
    })
}

/// Asks; the transaction's name for a group, the owed marker for a partition.
async fn ask(
    node: &Arc<Node>,
    transactional_id: &str,
    producer: (i64, i16),
    target: Target,
) -> Result<Answer, WireError> {
    let unavailable = |m: String| WireError::new(ErrorCode::CoordinatorNotAvailable, m);
    let Some((_, group)) = node.coordinator_partition(PartitionKind::TransactionState, transactional_id) else {
        return Err(unavailable("the transaction state topic does not exist yet".into()));
    };
    if let Some(Hosted::Transactions(p)) = node.replica(group) {
        if p.replica().state().is_leader {
            return serve_local(node, &p, transactional_id, producer, &target)
                .await
                .map_err(|e| errors::coordinator(&e));
        }
    }
    let leader = node.leader_of(group).ok_or_else(|| unavailable("the coordinator has no leader yet".into()))?;
    let mut client = node.cluster_client(leader).ok_or_else(|| unavailable(format!("no address for node {leader}")))?;
    let (topic, partition, verify_only, group_id) = match target {
        Target::Partition { topic, partition, add } => (topic, partition, !add, String::new()),
        Target::Group { group, add } => (String::new(), 0, !add, group),
    };
    let request = AddTxnPartitionRequest {
        from_node: node.id(),
        transactional_id: transactional_id.to_string(),
        producer_id: producer.0,
        producer_epoch: i32::from(producer.1),
        topic,
        partition,
        verify_only,
        group_id,
    };
    let answer = rill_rt::timeout(VERIFY_TIMEOUT, client.add_txn_partition(request))
        .await
        .map_err(|_| unavailable(format!("node {leader} did not answer in time")))?
        .map_err(|s| unavailable(s.message().to_string()))?
        .into_inner();
    match ErrorCode::try_from(answer.error_code).unwrap_or(ErrorCode::UnknownServerError) {
        ErrorCode::None => Ok(Answer { transaction_start: answer.transaction_start, owed: answer.owed_marker }),
        code => Err(WireError::new(code, answer.error_message)),
    }
}

async fn serve_local(
    node: &Node,
    p: &rill_broker::StatePartition<rill_coordinator::TransactionsMachine>,
    transactional_id: &str,
    producer: (i64, i16),
    target: &Target,
) -> Result<Answer, CoordinatorError> {
    match target {
        Target::Partition { topic, partition, add } => {
            let additions = node.txn_additions();
            let verified = transactions::verify_partition(
                additions,
                p,
                transactional_id,
                producer,
                topic,
                *partition,
                !add,
                VERIFY_TIMEOUT,
            )
            .await?;
            // The marker carries this coordinator's epoch, as the ones it writes itself do.
            let coordinator_epoch = i32::try_from(p.replica().state().term).unwrap_or(i32::MAX);
            Ok(Answer {
                transaction_start: verified.transaction_start,
                owed: verified.owed.map(|o| owed_to_proto(o, coordinator_epoch)),
            })
        }
        Target::Group { group, add } => {
            let additions = node.txn_additions();
            let verified =
                transactions::verify_group(additions, p, transactional_id, producer, group, *add, VERIFY_TIMEOUT)
                    .await?;
            let coordinator_epoch = i32::try_from(p.replica().state().term).unwrap_or(i32::MAX);
            Ok(Answer {
                transaction_start: verified.transaction_start,
                owed: verified.owed.map(|o| owed_to_proto(o, coordinator_epoch)),
            })
        }
    }
}

/// `Cluster.AddTxnPartition` on the coordinator's node.
pub async fn serve(node: &Arc<Node>, req: AddTxnPartitionRequest) -> AddTxnPartitionResponse {
    let answer = |e: WireError| AddTxnPartitionResponse {
        error_code: e.code as i32,
        error_message: e.message,
        ..Default::default()
    };
    let Ok(epoch) = i16::try_from(req.producer_epoch) else {
        return answer(WireError::new(ErrorCode::InvalidRequest, "producer epoch beyond 16 bits"));
    };
    let p = match crate::api::routing::coordinator_here(node, PartitionKind::TransactionState, &req.transactional_id) {
        Ok(Hosted::Transactions(p)) => p,
        Ok(_) => return answer(errors::coordinator_not_created(rill_meta::TRANSACTION_STATE_TOPIC)),
        Err(e) => return answer(e),
    };
    let target = if req.group_id.is_empty() {
        Target::Partition { topic: req.topic, partition: req.partition, add: !req.verify_only }
    } else {
        Target::Group { group: req.group_id, add: !req.verify_only }
    };
    match serve_local(node, &p, &req.transactional_id, (req.producer_id, epoch), &target).await {
        Ok(a) => AddTxnPartitionResponse {
            transaction_start: a.transaction_start,
            owed_marker: a.owed,
            ..Default::default()
        },
        Err(e) => answer(errors::coordinator(&e)),
    }
}

/// The partition's error for the coordinator's refusal.
fn to_partition(e: WireError) -> PartitionError {
    let message = e.message;
    match e.code {
        ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch | ErrorCode::InvalidProducerIdMapping => {
            PartitionError::TransactionFenced(message)
        }
        ErrorCode::InvalidTxnState => PartitionError::InvalidTxnState(message),
        ErrorCode::ConcurrentTransactions => PartitionError::ConcurrentTransactions(message),
        ErrorCode::InvalidRequest => PartitionError::InvalidRequest(message),
        _ => PartitionError::CoordinatorNotAvailable(message),
    }
}
