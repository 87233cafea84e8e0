//! The internal listener's operations that are a service of this node to the others: writing a
//! transaction coordinator's markers on a partition's leader (`Cluster.WriteTxnMarkers`),
//! appending a share group's dead-letter copy there (`Cluster.WriteDeadLetter`), and
//! answering a partition leader's or group coordinator's verification ask on a transaction
//! coordinator (`Cluster.AddTxnPartition(s)`). They take the internal protocol's messages — Rill's
//! own node-to-node wire, spoken by one listener — and decide with the same checks and routing
//! as the public operations.

use std::collections::{BTreeMap, BTreeSet};

use rill_proto::common::ErrorCode;
use rill_proto::internal::{
    AddTxnPartitionRequest, AddTxnPartitionResponse, WriteDeadLetterRequest, WriteDeadLetterResponse,
    WriteTxnMarkerResult, WriteTxnMarkersRequest,
};

use super::{checks, routing, Service};
use crate::errors::{self, Refusal};
use crate::txn_markers::{write_local, Marker};
use crate::txn_verify::{serve_local, Target};

impl Service {
    /// `Cluster.AddTxnPartition` on a transactional id's coordinator: verifies (v1) or adds
    /// (v2) a partition or a group for the partition leader or group coordinator that asks.
    pub async fn add_txn_partition(&self, req: AddTxnPartitionRequest) -> AddTxnPartitionResponse {
        let (node, coordinators) = (&self.node, &self.coordinators);
        let answer = |e: Refusal| AddTxnPartitionResponse {
            error_code: e.code as i32,
            error_message: e.message,
            ..Default::default()
        };
        let epoch = match checks::producer_epoch(req.producer_epoch) {
            Ok(epoch) => epoch,
            Err(e) => return answer(e),
        };
        let shard = routing::transaction_coordinator(node, &req.transactional_id)
            .and_then(|p| coordinators.transactions().of(&p));
        let shard = match shard {
            Ok(shard) => shard,
            Err(e) => return answer(e),
        };
        let target = if req.group_id.is_empty() {
            Target::Partition { topic: req.topic, partition: req.partition, add: !req.verify_only }
        } else {
            Target::Group { group: req.group_id, add: !req.verify_only }
        };
        match serve_local(&shard, &req.transactional_id, (req.producer_id, epoch), &target).await {
            Ok(a) => AddTxnPartitionResponse {
                transaction_start: a.transaction_start,
                owed_marker: a.owed,
                ..Default::default()
            },
            Err(e) => answer(errors::coordinator(&e)),
        }
    }

    /// `Cluster.WriteDeadLetter` on a partition's leader: appends a share group's dead-letter
    /// copy that another partition's leader sends.
    pub async fn write_dead_letter(&self, req: WriteDeadLetterRequest) -> WriteDeadLetterResponse {
        // The same lookup (and refusals) as any request naming a record partition.
        let refusal = match routing::local_replica(&self.node, &req.topic, &[], req.partition) {
            Ok(p) => crate::dead_letters::append_local(&p, req.batch).await.err(),
            Err(refusal) => Some(refusal),
        };
        WriteDeadLetterResponse {
            error_code: refusal.as_ref().map_or(ErrorCode::None as i32, |r| r.code as i32),
            error_message: refusal.map(|r| r.message).unwrap_or_default(),
        }
    }

    /// `Cluster.WriteTxnMarkers` on a partition's leader: writes a transaction coordinator's
    /// marker into each partition named, one result per partition.
    pub async fn write_txn_markers(&self, req: WriteTxnMarkersRequest) -> Vec<WriteTxnMarkerResult> {
        let node = &self.node;
        let result = |partition: u32, e: Option<Refusal>| WriteTxnMarkerResult {
            partition,
            error_code: e.as_ref().map_or(ErrorCode::None as i32, |e| e.code as i32),
            error_message: e.map(|e| e.message).unwrap_or_default(),
        };
        let epoch = match checks::producer_epoch(req.producer_epoch) {
            Ok(epoch) => epoch,
            Err(bad) => return req.partitions.iter().map(|p| result(*p, Some(bad.clone()))).collect(),
        };
        let marker = Marker {
            producer_id: req.producer_id,
            epoch,
            coordinator_epoch: req.coordinator_epoch,
            commit: req.commit,
            transaction_start: req.transaction_start,
        };
        let (req, result) = (&req, &result);
        let one = |p: u32| async move {
            let local = node
                .topic(&req.topic)
                .and_then(|t| t.partitions.get(p as usize).map(|a| a.group))
                .and_then(|g| node.replica(g));
            let outcome = match local {
                None => Some(Refusal::new(
                    ErrorCode::NotLeaderOrFollower,
                    format!("node {} hosts no replica of {}/{p}", node.id(), req.topic),
                )),
                Some(hosted) => write_local(&hosted, marker).await.err(),
            };
            result(p, outcome)
        };
        // A partition named twice is written once (and answered twice).
        let partitions: BTreeSet<u32> = req.partitions.iter().copied().collect();
        let written: BTreeMap<u32, WriteTxnMarkerResult> =
            futures::future::join_all(partitions.into_iter().map(|p| async move { (p, one(p).await) }))
                .await
                .into_iter()
                .collect();
        req.partitions.iter().filter_map(|p| written.get(p).cloned()).collect()
    }
}
