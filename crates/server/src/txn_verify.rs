//! Verifying with a transactional id's coordinator before accepting a transactional write
//! (KIP-890 part 1): a partition leader about to append the first transactional batch of a
//! producer asks whether the partition is in the producer's ongoing transaction (v1), or to add
//! it (v2); a group coordinator about to accept a transactional offset commit asks whether the
//! group is in it (added by `AddOffsetsToTxn`). Directly when the transaction coordinator is
//! this node, else through its internal `Cluster.AddTxnPartition`.
//!
//! One transactional id's asks bound for its coordinator at the same moment — a produce
//! request's partitions, handled together — travel in one `Cluster.AddTxnPartitions`
//! ([`Asks`]): a transaction's first batches over sixteen partitions cost a leader a few
//! requests to the coordinator, not one per partition.
//!
//! The answer is mapped to the partition's errors here, in one place: a fenced producer is
//! `INVALID_PRODUCER_EPOCH`, a partition not in the transaction `INVALID_TXN_STATE`, a busy
//! coordinator `CONCURRENT_TRANSACTIONS`, an unreachable one `COORDINATOR_NOT_AVAILABLE`. A
//! group coordinator answers the transaction coordinator's code as it is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill_broker::produce::{OwedMarker, Verified};
use rill_broker::PartitionError;
use rill_coordinator::offsets::txn as txn_offsets;
use rill_coordinator::transactions;
use rill_coordinator::CoordinatorError;
use rill_meta::PartitionKind;
use rill_proto::common::ErrorCode;
use rill_proto::internal::cluster_client::ClusterClient;
use rill_proto::internal::{AddTxnPartitionRequest, AddTxnPartitionResponse, AddTxnPartitionsRequest, OwedTxnMarker};
use rill_raft::NodeId;
use rill_records::{ControlKind, ControlMarker};
use rill_rt::sync::oneshot;
use tonic::transport::Channel;

use crate::coordinators::{Coordinators, Shard, TxnShard};
use crate::errors::{self, Refusal};
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
pub(crate) enum Target {
    /// A partition (checked, or added with `add`).
    Partition { topic: String, partition: u32, add: bool },
    /// A consumer group (checked, or added with `add`).
    Group { group: String, add: bool },
}

/// What this node asks transaction coordinators, as a partition leader (a transactional batch)
/// or a group coordinator (a transactional offset commit): one per node, so that one
/// transactional id's asks made together travel together ([`Asks`]).
pub struct Verifier {
    node: Arc<Node>,
    coordinators: Arc<Coordinators>,
    asks: Asks,
}

impl Verifier {
    /// The verifier of `node`, whose own transaction coordinator shards are `coordinators`.
    pub fn new(node: Arc<Node>, coordinators: Arc<Coordinators>) -> Arc<Self> {
        Arc::new(Self { node, coordinators, asks: Asks::default() })
    }

    /// Asks the coordinator of `v.transactional_id` about a partition: the transaction it is
    /// in, named, and the marker the partition is still owed by the producer's previous
    /// transaction, if any (v2).
    pub async fn verify(self: &Arc<Self>, v: Verify) -> Result<Verified, PartitionError> {
        let target = Target::Partition { topic: v.topic, partition: v.partition, add: !v.verify_only };
        let answer = self.ask(&v.transactional_id, v.producer, target).await.map_err(to_partition)?;
        Ok(Verified { transaction: answer.transaction_start, owed: answer.owed.map(owed_from_proto).transpose()? })
    }

    /// Asks the coordinator of `transactional_id` whether `group_id` is in the ongoing
    /// transaction of `producer` (id, epoch) — or, with `add` (transactions v2), to add it;
    /// that transaction's name when it is, and the marker the group is still owed by the
    /// producer's previous transaction, if any.
    pub async fn verify_group(
        self: &Arc<Self>,
        transactional_id: &str,
        producer: (i64, i16),
        group_id: &str,
        add: bool,
    ) -> Result<GroupVerified, Refusal> {
        let answer = self.ask(transactional_id, producer, Target::Group { group: group_id.to_string(), add });
        let answer = answer.await.map_err(|e| match e.code {
            // The *transaction* coordinator moved: to the committer this is not its group
            // coordinator moving, only a coordinator it needs being briefly unavailable.
            ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoadInProgress => {
                Refusal::new(ErrorCode::CoordinatorNotAvailable, e.message)
            }
            _ => e,
        })?;
        let owed = answer.owed.map(|o| group_marker_from_proto(o, producer.0)).transpose()?;
        Ok(GroupVerified { transaction: answer.transaction_start, owed })
    }

    /// Asks; the transaction's name for a group, the owed marker for a partition.
    async fn ask(
        self: &Arc<Self>,
        transactional_id: &str,
        producer: (i64, i16),
        target: Target,
    ) -> Result<Answer, Refusal> {
        let node = &self.node;
        let unavailable = |m: String| Refusal::new(ErrorCode::CoordinatorNotAvailable, m);
        let Some((_, group)) = node.coordinator_partition(PartitionKind::TransactionState, transactional_id) else {
            return Err(unavailable("the transaction state topic does not exist yet".into()));
        };
        if let Some(Hosted::Transactions(p)) = node.replica(group) {
            if p.replica().state().is_leader {
                let shard = self.coordinators.transactions().of(&p)?;
                return serve_local(&shard, transactional_id, producer, &target)
                    .await
                    .map_err(|e| errors::coordinator(&e));
            }
        }
        let leader = node.leader_of(group).ok_or_else(|| unavailable("the coordinator has no leader yet".into()))?;
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
        let answer = self.asks.ask(self, leader, request).await?;
        match ErrorCode::try_from(answer.error_code).unwrap_or(ErrorCode::UnknownServerError) {
            ErrorCode::None => Ok(Answer { transaction_start: answer.transaction_start, owed: answer.owed_marker }),
            code => Err(Refusal::new(code, answer.error_message)),
        }
    }
}

/// What the coordinator answers: the transaction's name, and a partition's owed marker.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    /// The transaction's name.
    pub(crate) transaction_start: u64,
    /// The marker the partition or group is still owed.
    pub(crate) owed: Option<OwedTxnMarker>,
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

fn group_marker_from_proto(o: OwedTxnMarker, producer_id: i64) -> Result<txn_offsets::TxnMarker, Refusal> {
    let producer_epoch = owed_epoch(&o).map_err(|m| Refusal::new(ErrorCode::CoordinatorNotAvailable, m))?;
    Ok(txn_offsets::TxnMarker {
        producer_id,
        producer_epoch,
        coordinator_epoch: o.coordinator_epoch,
        commit: o.commit,
        transaction_start: o.transaction_start,
    })
}

/// The asks this node has yet to send, by coordinator node and transactional id (see the
/// module docs). One per node, in its [`Verifier`].
///
/// Only one transactional id's asks travel together: the coordinator answers a request once
/// every ask in it is answered, and one id's ask may wait there (for its previous transaction's
/// markers), which must not hold up another producer's. One id's asks at one moment are
/// recorded in one write at the coordinator anyway, and answered together.
#[derive(Debug, Default)]
pub struct Asks {
    queued: Mutex<HashMap<(NodeId, String), Vec<Queued>>>,
}

/// An ask waiting to be sent, and where its answer goes.
#[derive(Debug)]
struct Queued {
    request: AddTxnPartitionRequest,
    answer: oneshot::Sender<Result<AddTxnPartitionResponse, Refusal>>,
}

impl Asks {
    /// Sends `request` to `leader` with the other asks for it and its transactional id made at
    /// the same moment; its answer. The first such ask starts a task that lets the others join
    /// (one turn of the scheduler: the partitions of a produce request reach their verification
    /// together) and then sends them all. A task, so that a caller going away abandons no one
    /// else's ask.
    async fn ask(
        &self,
        verifier: &Arc<Verifier>,
        leader: NodeId,
        request: AddTxnPartitionRequest,
    ) -> Result<AddTxnPartitionResponse, Refusal> {
        let (tx, rx) = oneshot::channel();
        let key = (leader, request.transactional_id.clone());
        if self.queue(key.clone(), Queued { request, answer: tx }) {
            let verifier = verifier.clone();
            rill_rt::spawn(async move {
                tokio::task::yield_now().await;
                let asks = verifier.asks.take(&key);
                send(&verifier.node, leader, asks).await;
            });
        }
        rx.await.unwrap_or_else(|_| Err(unavailable_at(leader, "the ask was dropped unsent")))
    }

    /// Queues `ask` under `key` (coordinator node, transactional id): true when it is the first
    /// there (its caller starts the sending).
    fn queue(&self, key: (NodeId, String), ask: Queued) -> bool {
        let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        let asks = queued.entry(key).or_default();
        asks.push(ask);
        asks.len() == 1
    }

    /// The asks queued under `key`, leaving none.
    fn take(&self, key: &(NodeId, String)) -> Vec<Queued> {
        self.queued.lock().unwrap_or_else(|p| p.into_inner()).remove(key).unwrap_or_default()
    }
}

fn unavailable_at(leader: NodeId, why: &str) -> Refusal {
    Refusal::new(ErrorCode::CoordinatorNotAvailable, format!("node {leader}: {why}"))
}

/// Sends `asks` to `leader` and answers each: one `AddTxnPartition` for a single ask (which
/// every node knows), else one `AddTxnPartitions` — or, from a node that does not know it yet,
/// one `AddTxnPartition` each.
async fn send(node: &Arc<Node>, leader: NodeId, asks: Vec<Queued>) {
    let Some(client) = node.cluster_client(leader) else {
        for ask in asks {
            let _ = ask.answer.send(Err(unavailable_at(leader, "no address for it")));
        }
        return;
    };
    send_through(client, node.id(), leader, asks).await;
}

/// [`send`] through `client`, a connection to node `leader`, from node `from_node`.
async fn send_through(mut client: ClusterClient<Channel>, from_node: NodeId, leader: NodeId, asks: Vec<Queued>) {
    tracing::debug!(leader, asks = asks.len(), "verification asks sent");
    if asks.len() == 1 {
        for ask in asks {
            let _ = ask.answer.send(ask_one(client.clone(), leader, ask.request).await);
        }
        return;
    }
    let (requests, answers): (Vec<_>, Vec<_>) = asks.into_iter().map(|q| (q.request, q.answer)).unzip();
    let batch = AddTxnPartitionsRequest { from_node, asks: requests.clone() };
    let answered = match rill_rt::timeout(VERIFY_TIMEOUT, client.add_txn_partitions(batch)).await {
        Err(_) => Err(unavailable_at(leader, "did not answer in time")),
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
            // An older node: one at a time, all at once.
            let each = requests.into_iter().map(|r| ask_one(client.clone(), leader, r));
            for (answer, outcome) in answers.into_iter().zip(futures::future::join_all(each).await) {
                let _ = answer.send(outcome);
            }
            return;
        }
        Ok(Err(status)) => Err(unavailable_at(leader, status.message())),
        Ok(Ok(response)) => {
            let got = response.into_inner().answers;
            if got.len() == answers.len() {
                Ok(got)
            } else {
                Err(unavailable_at(leader, &format!("answered {} of {} asks", got.len(), answers.len())))
            }
        }
    };
    match answered {
        Ok(got) => {
            for (answer, outcome) in answers.into_iter().zip(got) {
                let _ = answer.send(Ok(outcome));
            }
        }
        Err(e) => {
            for answer in answers {
                let _ = answer.send(Err(e.clone()));
            }
        }
    }
}

/// One `AddTxnPartition` to `leader`.
async fn ask_one(
    mut client: ClusterClient<Channel>,
    leader: NodeId,
    request: AddTxnPartitionRequest,
) -> Result<AddTxnPartitionResponse, Refusal> {
    match rill_rt::timeout(VERIFY_TIMEOUT, client.add_txn_partition(request)).await {
        Err(_) => Err(unavailable_at(leader, "did not answer in time")),
        Ok(Err(status)) => Err(unavailable_at(leader, status.message())),
        Ok(Ok(answer)) => Ok(answer.into_inner()),
    }
}

/// Answers an ask on this node, the transactional id's coordinator (`shard`): for a local ask,
/// and for one another node sent (`crate::service::internal`).
pub(crate) async fn serve_local(
    shard: &TxnShard,
    transactional_id: &str,
    producer: (i64, i16),
    target: &Target,
) -> Result<Answer, CoordinatorError> {
    let p = shard.partition();
    match target {
        Target::Partition { topic, partition, add } => {
            let additions = shard.additions();
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
            let additions = shard.additions();
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

/// The partition's error for the coordinator's refusal.
fn to_partition(e: Refusal) -> PartitionError {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(partition: u32) -> (Queued, oneshot::Receiver<Result<AddTxnPartitionResponse, Refusal>>) {
        let (tx, rx) = oneshot::channel();
        let request = AddTxnPartitionRequest { topic: "out".into(), partition, ..Default::default() };
        (Queued { request, answer: tx }, rx)
    }

    fn key(node: NodeId, id: &str) -> (NodeId, String) {
        (node, id.to_string())
    }

    #[test]
    fn one_ids_asks_for_one_node_queue_behind_the_first_until_taken() {
        let asks = Asks::default();
        let (a, _ra) = ask(0);
        let (b, _rb) = ask(1);
        let (c, _rc) = ask(2);
        let (d, _rd) = ask(3);
        assert!(asks.queue(key(2, "t"), a), "the first ask starts a sending");
        assert!(!asks.queue(key(2, "t"), b), "the next joins it");
        assert!(asks.queue(key(3, "t"), c), "another node's asks are sent on their own");
        assert!(asks.queue(key(2, "u"), d), "so are another transactional id's");
        let taken: Vec<u32> = asks.take(&key(2, "t")).iter().map(|q| q.request.partition).collect();
        assert_eq!(taken, vec![0, 1]);
        assert!(asks.take(&key(2, "t")).is_empty());
        // Taken: the next ask starts a new sending.
        let (e, _re) = ask(4);
        assert!(asks.queue(key(2, "t"), e));
        assert_eq!(asks.take(&key(3, "t")).len(), 1);
        assert_eq!(asks.take(&key(2, "u")).len(), 1);
    }
}

/// [`send_through`] against a coordinator node served here: what it sends, and how its answers
/// reach each ask.
#[cfg(test)]
#[cfg(not(madsim))]
mod sending_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rill_proto::internal::cluster_server::{Cluster, ClusterServer};
    use rill_proto::internal::*;
    use tonic::{Request, Response, Status};

    use super::*;

    /// How the coordinator node answers `AddTxnPartitions`.
    #[derive(Clone, Copy)]
    enum Batches {
        /// Ask by ask, in order (each answer names the ask's partition).
        Answered,
        /// `UNIMPLEMENTED`, as a node from before the RPC does.
        Unknown,
        /// One answer short.
        Short,
    }

    /// A coordinator node that answers every ask for partition `p` with `transaction_start`
    /// 100 + `p` (so each answer shows which ask it belongs to), and counts its requests.
    struct Coordinator {
        batches: Batches,
        singles: Arc<AtomicUsize>,
        batched: Arc<AtomicUsize>,
    }

    /// The node the asks come from; every request must name it.
    const FROM_NODE: NodeId = 1;

    fn answer(ask: &AddTxnPartitionRequest) -> AddTxnPartitionResponse {
        AddTxnPartitionResponse { transaction_start: 100 + u64::from(ask.partition), ..Default::default() }
    }

    fn unused<T>() -> Result<Response<T>, Status> {
        Err(Status::unimplemented("not served by this test"))
    }

    #[tonic::async_trait]
    impl Cluster for Coordinator {
        async fn ping(&self, _: Request<PingRequest>) -> Result<Response<PingResponse>, Status> {
            unused()
        }
        async fn propose_meta(&self, _: Request<ProposeMetaRequest>) -> Result<Response<ProposeMetaResponse>, Status> {
            unused()
        }
        async fn replica_status(
            &self,
            _: Request<ReplicaStatusRequest>,
        ) -> Result<Response<ReplicaStatusResponse>, Status> {
            unused()
        }
        async fn add_node(&self, _: Request<AddNodeRequest>) -> Result<Response<AddNodeResponse>, Status> {
            unused()
        }
        async fn elect_leader(&self, _: Request<ElectLeaderRequest>) -> Result<Response<ElectLeaderResponse>, Status> {
            unused()
        }
        async fn write_txn_markers(
            &self,
            _: Request<WriteTxnMarkersRequest>,
        ) -> Result<Response<WriteTxnMarkersResponse>, Status> {
            unused()
        }
        async fn write_dead_letter(
            &self,
            _: Request<rill_proto::internal::WriteDeadLetterRequest>,
        ) -> Result<Response<rill_proto::internal::WriteDeadLetterResponse>, Status> {
            unused()
        }
        async fn add_txn_partition(
            &self,
            request: Request<AddTxnPartitionRequest>,
        ) -> Result<Response<AddTxnPartitionResponse>, Status> {
            self.singles.fetch_add(1, Ordering::SeqCst);
            assert_eq!(request.get_ref().from_node, FROM_NODE, "an ask names its node");
            Ok(Response::new(answer(request.get_ref())))
        }
        async fn add_txn_partitions(
            &self,
            request: Request<AddTxnPartitionsRequest>,
        ) -> Result<Response<AddTxnPartitionsResponse>, Status> {
            self.batched.fetch_add(1, Ordering::SeqCst);
            assert_eq!(request.get_ref().from_node, FROM_NODE, "a batch names its node");
            let asks = &request.get_ref().asks;
            let answers: Vec<_> = match self.batches {
                Batches::Unknown => return Err(Status::unimplemented("unknown method AddTxnPartitions")),
                Batches::Answered => asks.iter().map(answer).collect(),
                Batches::Short => asks.iter().skip(1).map(answer).collect(),
            };
            Ok(Response::new(AddTxnPartitionsResponse { answers }))
        }
    }

    /// Sends asks for `partitions` to a coordinator answering batches as `batches`: each ask's
    /// outcome (its `transaction_start`, or the error code), and the requests it got (single,
    /// batched).
    async fn send_to(batches: Batches, partitions: &[u32]) -> (Vec<Result<u64, ErrorCode>>, usize, usize) {
        let (singles, batched) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let coordinator = Coordinator { batches, singles: singles.clone(), batched: batched.clone() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server =
            tonic::transport::Server::builder().add_service(ClusterServer::new(coordinator)).serve_with_incoming(
                crate::api::connections::accept(listener, std::sync::Arc::new(tokio::sync::Semaphore::new(4))),
            );
        let served = tokio::spawn(server);
        let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
        let mut answers = Vec::new();
        let mut asks = Vec::new();
        for &partition in partitions {
            let (tx, rx) = oneshot::channel();
            let request =
                AddTxnPartitionRequest { from_node: FROM_NODE, topic: "out".into(), partition, ..Default::default() };
            asks.push(Queued { request, answer: tx });
            answers.push(rx);
        }
        send_through(ClusterClient::new(channel), FROM_NODE, 2, asks).await;
        let mut outcomes = Vec::new();
        for rx in answers {
            let outcome = rx.await.expect("every ask is answered");
            outcomes.push(outcome.map(|a| a.transaction_start).map_err(|e| e.code));
        }
        served.abort();
        (outcomes, singles.load(Ordering::SeqCst), batched.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn asks_travel_in_one_request_and_each_gets_its_own_answer() {
        let (outcomes, singles, batched) = send_to(Batches::Answered, &[3, 1, 2]).await;
        assert_eq!(outcomes, vec![Ok(103), Ok(101), Ok(102)]);
        assert_eq!((singles, batched), (0, 1));
    }

    #[tokio::test]
    async fn a_single_ask_goes_as_add_txn_partition() {
        let (outcomes, singles, batched) = send_to(Batches::Answered, &[7]).await;
        assert_eq!(outcomes, vec![Ok(107)]);
        assert_eq!((singles, batched), (1, 0));
    }

    #[tokio::test]
    async fn a_node_without_add_txn_partitions_gets_one_ask_at_a_time() {
        let (outcomes, singles, batched) = send_to(Batches::Unknown, &[3, 1, 2]).await;
        assert_eq!(outcomes, vec![Ok(103), Ok(101), Ok(102)]);
        assert_eq!((singles, batched), (3, 1));
    }

    #[tokio::test]
    async fn an_answer_missing_fails_every_ask_of_the_request() {
        let (outcomes, singles, batched) = send_to(Batches::Short, &[3, 1, 2]).await;
        let unavailable = Err(ErrorCode::CoordinatorNotAvailable);
        assert_eq!(outcomes, vec![unavailable; 3]);
        assert_eq!((singles, batched), (0, 1), "not asked again one by one: the leader retries");
    }
}
