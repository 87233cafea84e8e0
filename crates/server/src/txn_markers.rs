//! Finishing transactions on their coordinator's leader: writing the commit or abort markers of
//! every `Prepare*` record into the partitions of its transaction, then recording completion.
//!
//! ```text
//!  EndTxn ─► Prepare* written ─► finish: markers to each partition's leader ─► Complete* written
//!  every second, on each led __transaction_state partition (its shard's timer,
//!  crate::coordinators::TxnShard):
//!     open past its timeout ─► PrepareAbort (epoch bumped) ─┐
//!     Prepare* left by an earlier leader ───────────────────┴─► finish
//! ```
//!
//! A marker carries the coordinator's epoch — its Raft term in the `__transaction_state`
//! partition — so a partition refuses markers of a deposed coordinator. A marker is written to
//! the partition's leader: directly when that is this node, else through the leader's internal
//! `Cluster.WriteTxnMarkers`. Failures (no leader yet, a leader moving) are retried until every
//! marker is written or this node stops leading the coordinator's partition; the next leader
//! then finds the `Prepare*` record and finishes it. Each marker names the transaction it ends
//! (`txn_start_version`), and a partition applies only the first marker of a transaction, so
//! writing one twice is harmless, also after completion, when the producer's next transaction
//! may be open there under the same epochs: the copy decides nothing.
//!
//! A deposed coordinator leader still acting on its `Prepare*` record sends copies with its
//! older term. They are also refused by their coordinator epoch, which matters for markers
//! that name no transaction (written before markers named theirs): every partition of the
//! transaction has seen a marker of the completing term before completion — a leader that led
//! again in a new term writes every marker again, and the completion applies only in an entry
//! of the term its markers carried (`WriteTransaction.markers_term`).
//!
//! A partition of a deleted topic needs no marker.
//!
//! A consumer group whose offsets the transaction commits (`AddOffsetsToTxn`) gets its marker in
//! the `__consumer_offsets` partition it hashes to, whose leader is the group's coordinator: the
//! marker commits or drops the offsets pending there
//! ([`rill_coordinator::offsets::txn`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rill_broker::{PartitionError, StatePartition};
use rill_coordinator::offsets::txn as txn_offsets;
use rill_coordinator::transactions::{self, TransactionMetadata};
use rill_coordinator::TransactionsMachine;
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;
use rill_proto::internal::WriteTxnMarkersRequest;
use rill_records::{ControlKind, ControlMarker};

use crate::errors;
use crate::node::{Hosted, Node};

/// How long one marker, or one coordinator write, may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between rounds of markers that could not be written yet.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Writes every marker of `prepared` (the `Prepare*` record of `transactional_id` in
/// `coordinator`), then its completion. `Ok(false)` when another leader completed it first; an
/// error once this node no longer leads `coordinator` (the next leader finishes it). Its caller
/// makes sure one transaction is finished once at a time (`crate::coordinators::TxnShard`).
pub(crate) async fn finish(
    node: &Weak<Node>,
    coordinator: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    prepared: &TransactionMetadata,
) -> Result<bool, String> {
    let commit = prepared.state == transactions::TxnState::PrepareCommit;
    let mut pending: Vec<(String, u32)> =
        prepared.partitions.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p))).collect();
    if !prepared.groups.is_empty() {
        let Some(n) = node.upgrade() else { return Err("the node is stopping".into()) };
        // Several groups may share a partition of `__consumer_offsets`: one marker each.
        let offsets: std::collections::BTreeSet<u32> = prepared
            .groups
            .iter()
            .filter_map(|g| n.coordinator_partition(PartitionKind::ConsumerOffsets, g).map(|(p, _)| p))
            .collect();
        if offsets.is_empty() {
            return Err(format!("{} does not exist yet", rill_meta::CONSUMER_OFFSETS_TOPIC));
        }
        pending.extend(offsets.into_iter().map(|p| (rill_meta::CONSUMER_OFFSETS_TOPIC.to_string(), p)));
    }
    let transaction_start = prepared.txn_start_version;
    let every = pending.clone();
    let started = rill_rt::now();
    let mut round_term = None;
    let markers_term = loop {
        // The coordinator's epoch is its current term; a node that no longer leads stops here.
        let state = coordinator.replica().state();
        if !state.is_leader {
            return Err("this node no longer leads the coordinator's partition".into());
        }
        if round_term.is_some_and(|t| t != state.term) {
            // Leading again in a new term: every partition gets the new epoch's marker, also
            // those an earlier term's marker reached. A leader deposed in between may still act
            // on this `Prepare*` record; once this transaction is complete and the next one of
            // the same producer epoch (v2) has begun, its stale marker must be refused
            // everywhere, not only where this term happened to write again.
            pending = every.clone();
        }
        round_term = Some(state.term);
        let coordinator_epoch = i32::try_from(state.term).unwrap_or(i32::MAX);
        // Another leader may have completed it meanwhile (and the id moved on).
        let finishing = coordinator
            .read(|m| m.state().get(transactional_id).is_some_and(|r| r.is_finishing(transaction_start)))
            .map_err(|e| e.to_string())?;
        if !finishing {
            return Ok(false);
        }
        let Some(n) = node.upgrade() else { return Err("the node is stopping".into()) };
        let marker = Marker {
            producer_id: prepared.producer_id,
            epoch: prepared.epoch,
            coordinator_epoch,
            commit,
            transaction_start,
        };
        // All at once: each marker is a replicated write at its partition's leader, and the
        // next transaction of this id waits for the last one.
        let written = write_markers(&n, &pending, marker).await;
        drop(n);
        let mut still = Vec::new();
        for ((topic, partition), outcome) in pending.into_iter().zip(written) {
            if let Err(e) = outcome {
                tracing::debug!(transactional_id, topic, partition, error = %e, "marker not written yet");
                still.push((topic, partition));
            }
        }
        if still.is_empty() {
            break state.term;
        }
        pending = still;
        rill_rt::sleep(RETRY_PAUSE).await;
    };
    let completing = rill_rt::now();
    // Applies only in an entry of the term every marker carried (else it is refused, and the
    // next leader finishes the transaction with a round of its own).
    let completed = transactions::complete(coordinator, transactional_id, prepared, markers_term, STEP_TIMEOUT)
        .await
        .map_err(|e| e.to_string());
    tracing::debug!(
        transactional_id,
        markers_ms = (completing - started).as_secs_f64() * 1e3,
        complete_ms = completing.elapsed().as_secs_f64() * 1e3,
        "transaction markers and completion written"
    );
    completed
}

/// One marker to write.
#[derive(Debug, Clone, Copy)]
pub struct Marker {
    /// The transaction's producer id.
    pub producer_id: i64,
    /// The epoch the marker carries.
    pub epoch: i16,
    /// The coordinator's epoch.
    pub coordinator_epoch: i32,
    /// Commit or abort.
    pub commit: bool,
    /// The transaction it ends (the version of the coordinator's write that began it): what a
    /// group's partition matches pending offsets against.
    pub transaction_start: u64,
}

impl Marker {
    fn for_offsets(self) -> txn_offsets::TxnMarker {
        txn_offsets::TxnMarker {
            producer_id: self.producer_id,
            producer_epoch: self.epoch,
            coordinator_epoch: self.coordinator_epoch,
            commit: self.commit,
            transaction_start: self.transaction_start,
        }
    }
}

/// Where one marker is written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route<L> {
    /// Nowhere: the partition's topic is gone, and a deleted partition needs no marker.
    Gone,
    /// This node leads the partition: written directly.
    Local(L),
    /// Through this leader's `Cluster.WriteTxnMarkers`.
    Remote(u64),
    /// The partition has no leader yet: retried in the next round.
    NoLeader,
}

/// The markers of one round, arranged by route.
#[derive(Debug)]
struct Plan<'a, L> {
    /// Outcomes known before anything is written (gone, no leader), by index into `pending`.
    known: Vec<(usize, Result<(), String>)>,
    /// Partitions this node leads, by index into `pending`.
    local: Vec<(usize, L)>,
    /// (leader, topic) → the indexes into `pending` one request to that leader names: at most a
    /// topic's partitions, well within what one request may name.
    remote: BTreeMap<(u64, &'a str), Vec<usize>>,
}

/// Arranges `pending` by where each marker goes (`route`).
fn plan<L>(pending: &[(String, u32)], route: impl Fn(&str, u32) -> Route<L>) -> Plan<'_, L> {
    let mut plan = Plan { known: Vec::new(), local: Vec::new(), remote: BTreeMap::new() };
    for (i, (topic, partition)) in pending.iter().enumerate() {
        match route(topic, *partition) {
            Route::Gone => plan.known.push((i, Ok(()))),
            Route::Local(hosted) => plan.local.push((i, hosted)),
            Route::Remote(leader) => plan.remote.entry((leader, topic.as_str())).or_default().push(i),
            Route::NoLeader => plan.known.push((i, Err(format!("{topic}/{partition} has no leader yet")))),
        }
    }
    plan
}

/// Writes `marker` into every partition of `pending` at its leader; one outcome per partition,
/// in `pending`'s order. The markers a node leads for one topic go in one request: a
/// transaction over sixteen partitions costs the coordinator a request per node, not sixteen.
async fn write_markers(node: &Arc<Node>, pending: &[(String, u32)], marker: Marker) -> Vec<Result<(), String>> {
    let Plan { known, local, remote } = plan(pending, |topic, partition| {
        let Some(group) = node.topic(topic).and_then(|m| m.partitions.get(partition as usize).map(|a| a.group)) else {
            return Route::Gone;
        };
        if let Some(hosted) = node.replica(group).filter(|h| h.replica().state().is_leader) {
            return Route::Local(hosted);
        }
        node.leader_of(group).map_or(Route::NoLeader, Route::Remote)
    });
    let mut outcomes: Vec<Option<Result<(), String>>> = vec![None; pending.len()];
    for (i, outcome) in known {
        outcomes[i] = Some(outcome);
    }
    let locally = futures::future::join_all(local.into_iter().map(|(i, hosted)| async move {
        let started = rill_rt::now();
        let written = write_local(&hosted, marker).await.map_err(|e| e.message);
        let ms = started.elapsed().as_secs_f64() * 1e3;
        tracing::debug!(topic = %pending[i].0, partition = pending[i].1, local = true, ms, "marker written");
        (i, written)
    }));
    let remotely = futures::future::join_all(remote.into_iter().map(|((leader, topic), indexes)| async move {
        let partitions: Vec<u32> = indexes.iter().map(|i| pending[*i].1).collect();
        let answered = write_remote(node, leader, topic, &partitions, marker).await;
        indexes.into_iter().zip(partitions).map(move |(i, p)| {
            (
                i,
                answered
                    .get(&p)
                    .cloned()
                    .unwrap_or_else(|| Err(format!("node {leader} answered no result for {topic}/{p}"))),
            )
        })
    }));
    let (locally, remotely) = futures::future::join(locally, remotely).await;
    for (i, outcome) in locally.into_iter().chain(remotely.into_iter().flatten()) {
        outcomes[i] = Some(outcome);
    }
    outcomes.into_iter().map(|o| o.unwrap_or_else(|| Err("no marker was written".into()))).collect()
}

/// Writes `marker` into `partitions` of `topic` through their leader `leader`'s
/// `Cluster.WriteTxnMarkers`: each partition's outcome (a failed request fails them all).
async fn write_remote(
    node: &Arc<Node>,
    leader: u64,
    topic: &str,
    partitions: &[u32],
    marker: Marker,
) -> HashMap<u32, Result<(), String>> {
    let started = rill_rt::now();
    let every = |e: String| partitions.iter().map(|p| (*p, Err(e.clone()))).collect();
    let Some(mut client) = node.cluster_client(leader) else { return every(format!("no address for node {leader}")) };
    let request = WriteTxnMarkersRequest {
        from_node: node.id(),
        producer_id: marker.producer_id,
        producer_epoch: i32::from(marker.epoch),
        coordinator_epoch: marker.coordinator_epoch,
        commit: marker.commit,
        topic: topic.to_string(),
        partitions: partitions.to_vec(),
        timeout_ms: STEP_TIMEOUT.as_millis() as u32,
        transaction_start: marker.transaction_start,
    };
    let answer = match rill_rt::timeout(STEP_TIMEOUT * 2, client.write_txn_markers(request)).await {
        Err(_) => return every(format!("node {leader} did not answer in time")),
        Ok(Err(status)) => return every(status.message().to_string()),
        Ok(Ok(answer)) => answer.into_inner(),
    };
    let ms = started.elapsed().as_secs_f64() * 1e3;
    tracing::debug!(topic, partitions = partitions.len(), local = false, leader, ms, "markers written");
    answer
        .results
        .into_iter()
        .map(|r| {
            let outcome = if r.error_code == ErrorCode::None as i32 { Ok(()) } else { Err(r.error_message) };
            (r.partition, outcome)
        })
        .collect()
}

/// Writes `marker` into a partition this node leads: a record partition appends a control
/// batch; a group's `__consumer_offsets` partition commits or drops the producer's pending
/// offsets.
pub(crate) async fn write_local(hosted: &Hosted, marker: Marker) -> Result<(), errors::Refusal> {
    match hosted {
        Hosted::Records(partition) => {
            let kind = if marker.commit { ControlKind::Commit } else { ControlKind::Abort };
            let control = ControlMarker {
                kind,
                coordinator_epoch: marker.coordinator_epoch,
                transaction: marker.transaction_start,
            };
            let written = partition.append_control(control, marker.producer_id, marker.epoch, STEP_TIMEOUT).await;
            // The coordinator retries wherever the leader is now: no address needed.
            written.map(|_| ()).map_err(|e: PartitionError| errors::partition(&e, |_| None))
        }
        Hosted::Offsets(partition) => txn_offsets::write_marker(partition, marker.for_offsets(), STEP_TIMEOUT)
            .await
            .map_err(|e| errors::coordinator(&e)),
        Hosted::Transactions(_) => {
            Err(errors::Refusal::new(ErrorCode::InvalidRequest, "a transaction state partition takes no markers"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(of: &[(&str, u32)]) -> Vec<(String, u32)> {
        of.iter().map(|(t, p)| (t.to_string(), *p)).collect()
    }

    #[test]
    fn a_leaders_partitions_of_one_topic_share_one_request() {
        let pending = pending(&[("out", 0), ("out", 1), ("out", 2), ("out", 3), ("__consumer_offsets", 7), ("out", 4)]);
        // Node 1 (this one) leads out/0 and out/3; node 2 the other partitions of `out` and the
        // group's partition.
        let plan = plan(&pending, |topic, p| match (topic, p) {
            ("out", 0 | 3) => Route::Local(p),
            _ => Route::Remote(2),
        });
        assert_eq!(plan.local, vec![(0, 0), (3, 3)]);
        assert!(plan.known.is_empty());
        let requests: Vec<_> = plan.remote.into_iter().collect();
        assert_eq!(requests, vec![((2, "__consumer_offsets"), vec![4]), ((2, "out"), vec![1, 2, 5])]);
    }

    #[test]
    fn each_leader_gets_its_own_request_and_the_rest_are_answered_at_once() {
        let pending = pending(&[("out", 0), ("out", 1), ("gone", 0), ("out", 2), ("out", 3)]);
        let plan = plan(&pending, |topic, p| match (topic, p) {
            ("gone", _) => Route::Gone,
            (_, 0) => Route::Remote(2),
            (_, 1) => Route::Remote(3),
            (_, 2) => Route::NoLeader,
            _ => Route::<()>::Remote(2),
        });
        assert!(plan.local.is_empty());
        assert_eq!(plan.known.len(), 2);
        assert_eq!(plan.known[0], (2, Ok(())));
        assert_eq!(plan.known[1].0, 3);
        assert!(plan.known[1].1.as_ref().is_err_and(|e| e.contains("out/2 has no leader")));
        let requests: Vec<_> = plan.remote.into_iter().collect();
        assert_eq!(requests, vec![((2, "out"), vec![0, 4]), ((3, "out"), vec![1])]);
    }
}
