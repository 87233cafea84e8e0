//! Records in and out: produce (plain, idempotent, transactional with its KIP-890
//! verification), fetch (a long poll within a response budget, at either isolation level), list
//! offsets, and producer ids.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::{join_all, select_all};
use rill_broker::{Acks, FetchOutcome, Isolation, Partition, ProduceOutcome, SubmitTurn};
use rill_coordinator::transactions::{self, TxnProtocol};
use rill_meta::PartitionKind;

use super::authz::{ResourceType, CLUSTER_RESOURCE};
use super::checks::{self, Transactional};
use super::limits::{self, SeenPartitions};
use super::routing::{coordinator_here, local_replica};
use super::{Answer, Answers, RequestContext, RequestError, Service, TopicAnswers};
use crate::errors;
use crate::node::Hosted;

/// Produce timeout when the request gives none.
const DEFAULT_PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest produce timeout a request may ask for.
const MAX_PRODUCE_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest fetch long-poll.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(60);
/// Fetch response budget when the request gives none.
const DEFAULT_FETCH_MAX_BYTES: usize = 8 << 20;
/// Largest fetch response budget a request may ask for: half the largest message a listener
/// carries, so an answer (its batches and per-partition fields) always fits one message.
const MAX_FETCH_MAX_BYTES: usize = rill_proto::MAX_GRPC_MESSAGE_BYTES / 2;
/// Per-partition fetch budget when the request gives none.
const DEFAULT_PARTITION_MAX_BYTES: usize = 1 << 20;
/// How long a transactional `InitProducerId` may take to be committed by its coordinator.
const INIT_PRODUCER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a produce waits for this node's metadata to show that its producer id was issued.
const ISSUED_ID_WAIT: Duration = Duration::from_secs(1);

/// A produce request.
#[derive(Debug, Clone)]
pub struct ProduceRequest {
    /// The producer's transactional id; empty for a producer without transactions.
    pub transactional_id: String,
    /// The transaction protocol's version number ([`TxnProtocol::from_version`]); read only with
    /// a transactional id.
    pub transaction_version: u32,
    /// What acknowledgement to wait for; a refusal when the listener could not read the value
    /// (every partition is answered with it).
    pub acks: Answer<Acks>,
    /// How long to wait for the acknowledgement; 0 for the default (30 s), at most 300 s.
    pub timeout_ms: u32,
    /// The batches, by topic.
    pub topics: Vec<TopicBatches>,
    /// The request's place among its connection's pipelined produce requests: its batches are
    /// queued for their logs only after the previous request's ([`rill_broker::submit_order`]).
    /// `None` where the listener keeps no such order (gRPC calls are independent).
    pub turn: Option<SubmitTurn>,
}

impl Default for ProduceRequest {
    /// Nothing to produce, without a transaction, acknowledged by every in-sync replica.
    fn default() -> Self {
        Self {
            transactional_id: String::new(),
            transaction_version: 0,
            acks: Ok(Acks::All),
            timeout_ms: 0,
            topics: Vec::new(),
            turn: None,
        }
    }
}

/// One topic's batches.
#[derive(Debug, Clone, Default)]
pub struct TopicBatches {
    /// The topic.
    pub topic: String,
    /// The topic's id, when the client names it: a topic that no longer has it is refused.
    pub topic_id: Bytes,
    /// A batch per partition.
    pub partitions: Vec<(u32, Bytes)>,
}

/// A fetch request.
#[derive(Debug, Clone, Default)]
pub struct FetchRequest {
    /// Longest to wait for data when none is available yet (at most 60 s).
    pub max_wait_ms: u32,
    /// Which records may be read.
    pub isolation: Isolation,
    /// The answer's budget over every partition; 0 for the default (8 MiB).
    pub max_bytes: u32,
    /// The partitions to read, by topic.
    pub topics: Vec<FetchTopic>,
}

/// One topic's partitions to fetch.
#[derive(Debug, Clone, Default)]
pub struct FetchTopic {
    /// The topic; empty when the client names it by its id alone (Kafka's `Fetch` v13+).
    pub topic: String,
    /// The topic's id, when the client names it.
    pub topic_id: Bytes,
    /// Each partition to read.
    pub partitions: Vec<FetchPartition>,
}

/// One partition to fetch.
#[derive(Debug, Clone, Copy, Default)]
pub struct FetchPartition {
    /// The partition.
    pub partition: u32,
    /// The first offset wanted.
    pub offset: i64,
    /// The partition's budget; 0 for the default (1 MiB).
    pub max_bytes: u32,
    /// The leader epoch the client last saw the partition's leader in, when it says
    /// ([`checks::leader_epoch`]).
    pub current_leader_epoch: Option<i32>,
}

/// Which offset `ListOffsets` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The end of what the isolation level may read.
    Latest,
    /// The first offset appended at or after this time (milliseconds since the epoch).
    Timestamp(i64),
    /// The first record whose own timestamp is at or after this time (Kafka's search by
    /// timestamp).
    RecordTimestamp(i64),
    /// The first record with the largest timestamp (Kafka's `MAX_TIMESTAMP`).
    MaxTimestamp,
}

/// A partition's listed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// The offset; `None` when a search by record timestamp found no record.
    pub offset: Option<u64>,
    /// A search by record timestamp: the found record's timestamp.
    pub timestamp_ms: Option<i64>,
    /// The leader epoch of the record at the offset (the end: the leader's own epoch), when
    /// the partition knows it — what a Kafka client checks its position against (KIP-320).
    pub leader_epoch: Option<u64>,
}

impl ListedOffset {
    fn at(offset: u64, replica: &Partition) -> Self {
        Self { offset: Some(offset), timestamp_ms: None, leader_epoch: replica.epoch_at(offset) }
    }

    fn end(offset: u64, replica: &Partition) -> Self {
        Self { offset: Some(offset), timestamp_ms: None, leader_epoch: replica.leader_term() }
    }

    fn found(record: Option<rill_broker::TimestampedOffset>, replica: &Partition) -> Self {
        Self {
            offset: record.map(|r| r.offset),
            timestamp_ms: record.map(|r| r.timestamp_ms),
            leader_epoch: record.and_then(|r| replica.epoch_at(r.offset)),
        }
    }
}

/// One topic's partitions whose offsets to list.
#[derive(Debug, Clone, Default)]
pub struct ListOffsetsTopic {
    /// The topic.
    pub topic: String,
    /// Each partition, with the offset asked of it.
    pub partitions: Vec<(u32, OffsetSpec)>,
}

/// One partition `OffsetForLeaderEpoch` asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochQuery {
    /// The partition.
    pub partition: u32,
    /// The leader epoch the client last saw the partition's leader in, when it says
    /// ([`checks::leader_epoch`]).
    pub current_leader_epoch: Option<i32>,
    /// The epoch whose end the client asks for (negative: none).
    pub leader_epoch: i32,
}

/// One topic's partitions `OffsetForLeaderEpoch` asks about.
#[derive(Debug, Clone, Default)]
pub struct EpochQueryTopic {
    /// The topic.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<EpochQuery>,
}

/// A read of one partition on its leader, which may name the leader epoch its client last saw.
trait LeaderQuery {
    /// The partition.
    fn partition(&self) -> u32;
    /// That epoch, if the query names one.
    fn current_leader_epoch(&self) -> Option<i32>;
}

impl LeaderQuery for (u32, OffsetSpec) {
    fn partition(&self) -> u32 {
        self.0
    }

    fn current_leader_epoch(&self) -> Option<i32> {
        None
    }
}

impl LeaderQuery for EpochQuery {
    fn partition(&self) -> u32 {
        self.partition
    }

    fn current_leader_epoch(&self) -> Option<i32> {
        self.current_leader_epoch
    }
}

/// An `InitProducerId` request.
#[derive(Debug, Clone, Default)]
pub struct InitProducerIdRequest {
    /// The transactional id; empty for an idempotent producer without transactions.
    pub transactional_id: String,
    /// The transaction timeout the producer asks for.
    pub transaction_timeout_ms: u32,
    /// The producer id and epoch the producer has now (KIP-360), when it has one.
    pub current: Option<(i64, i32)>,
}

/// One batch of a produce request, for the partition it names.
struct OneBatch<'a> {
    topic: &'a str,
    topic_id: &'a [u8],
    partition: u32,
    batch: Bytes,
    turn: Option<SubmitTurn>,
}

impl Service {
    /// Produces every batch of `req` to its partition's leader on this node and answers each on
    /// its own: a transactional batch once its coordinator has verified (v1) or added (v2) the
    /// partition to the transaction; a batch under a producer id the cluster never issued is
    /// refused. Each topic needs Write (and the transactional id Write).
    pub async fn produce(
        &self,
        ctx: &RequestContext,
        req: ProduceRequest,
    ) -> Result<Answers<ProduceOutcome>, RequestError> {
        let partitions = req.topics.iter().map(|t| t.partitions.len()).sum();
        limits::check_counts("Produce", req.topics.len(), partitions)?;
        let timeout = match req.timeout_ms {
            0 => DEFAULT_PRODUCE_TIMEOUT,
            ms => Duration::from_millis(u64::from(ms)).min(MAX_PRODUCE_TIMEOUT),
        };
        let txn = checks::transactional(&req.transactional_id, req.transaction_version)?;
        // A denied transactional id answers every batch with its refusal, as Kafka does.
        let txn_denied = match &txn {
            Some(t) => self.authorize(ctx, ResourceType::TransactionalId, &t.id).err(),
            None => None,
        };
        let (acks, txn) = (&req.acks, txn.as_ref());
        let mut seen = SeenPartitions::default();
        // Each batch holds a copy of the request's turn until it is queued or refused; the
        // request's own is given up before any is awaited.
        let turn = req.turn;
        let topics = req.topics.into_iter().map(|t| {
            let denied = txn_denied.clone().or_else(|| self.authorize(ctx, ResourceType::Topic, &t.topic).err());
            let duplicates: Vec<bool> = t.partitions.iter().map(|(p, _)| !seen.first(&t.topic, *p)).collect();
            let turns: Vec<Option<SubmitTurn>> = t.partitions.iter().map(|_| turn.clone()).collect();
            async move {
                let parts = t.partitions.into_iter().zip(duplicates).zip(turns).map(
                    |(((partition, batch), duplicate), turn)| {
                        let (topic, topic_id, denied) = (&t.topic, &t.topic_id, &denied);
                        async move {
                            let answer = match denied {
                                Some(e) => Err(e.clone()),
                                None if duplicate => Err(errors::duplicate_partition(topic, partition)),
                                None => {
                                    let one = OneBatch { topic, topic_id, partition, batch, turn };
                                    self.produce_one(one, acks, timeout, txn).await
                                }
                            };
                            (partition, answer)
                        }
                    },
                );
                TopicAnswers { partitions: join_all(parts).await, topic: t.topic }
            }
        });
        let topics: Vec<_> = topics.collect();
        drop(turn);
        Ok(join_all(topics).await)
    }

    async fn produce_one(
        &self,
        one: OneBatch<'_>,
        acks: &Answer<Acks>,
        timeout: Duration,
        txn: Option<&Transactional>,
    ) -> Answer<ProduceOutcome> {
        let OneBatch { topic, topic_id, partition, batch, turn } = one;
        let acks = acks.clone()?;
        if batch.is_empty() {
            return Err(errors::missing_batch(partition));
        }
        let replica = local_replica(&self.node, topic, topic_id, partition)?;
        self.check_issued(&batch).await?;
        let produced = match txn {
            None => replica.produce(batch, acks, timeout, turn).await,
            Some(_) if acks != Acks::All => {
                Err(rill_broker::PartitionError::InvalidRequest("transactional batches need acks=all".into()))
            }
            Some(t) => {
                let header = rill_records::BatchInfo::parse(&batch).ok();
                let producer = header.map_or((-1, -1), |h| (h.producer_id, h.producer_epoch));
                let verify = crate::txn_verify::Verify {
                    transactional_id: t.id.clone(),
                    producer,
                    topic: topic.to_string(),
                    partition,
                    verify_only: t.protocol == TxnProtocol::V1,
                };
                let verifier = &self.verifier;
                // Boxed: the coordinator's future is deep, and the produce path nests it again.
                let verify = || Box::pin(verifier.verify(verify.clone()));
                replica.produce_transactional(batch, timeout, verify, turn).await
            }
        };
        produced.map_err(|e| errors::partition(&e, |id| self.node.client_addr(id)))
    }

    /// Refuses a batch under a producer id the cluster never issued, so that made-up ids cannot
    /// fill a partition's producer table and lock real producers out. Ids are issued in blocks
    /// through the metadata, so every issued id is below the metadata's next one; an id issued
    /// by another node moments ago may not have reached this node's metadata yet, so it waits
    /// briefly for it. (The header is read only to find the id; the batch is checked later.)
    async fn check_issued(&self, batch: &Bytes) -> Answer<()> {
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

    /// Reads every partition of `req` led here, each within its own budget and together within
    /// the response's. When nothing is readable yet, waits up to `max_wait_ms` for any partition
    /// to have data (a long poll). What was read counts against the response budget whether or
    /// not a listener later leaves it out; past the budget a partition is answered empty, to be
    /// fetched next time. A `read_committed` answer keeps its aborted-transaction list and its
    /// control batches: each listener decides what its clients get. Each topic needs Read.
    pub async fn fetch(
        &self,
        ctx: &RequestContext,
        mut req: FetchRequest,
    ) -> Result<Answers<FetchOutcome>, RequestError> {
        limits::check_counts("Fetch", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        checks::name_topics_by_id(&self.node.meta(), req.topics.iter_mut().map(|t| (&mut t.topic, &t.topic_id[..])));
        let max_wait = Duration::from_millis(u64::from(req.max_wait_ms)).min(MAX_FETCH_WAIT);
        let isolation = req.isolation;
        let response_budget = match req.max_bytes {
            0 => DEFAULT_FETCH_MAX_BYTES,
            n => (n as usize).min(MAX_FETCH_MAX_BYTES),
        };
        // Resolve every partition once; refusals are answered as they are.
        struct Target {
            topic_idx: usize,
            partition: u32,
            offset: i64,
            max_bytes: usize,
            replica: Answer<Arc<Partition>>,
        }
        let at_epoch = |topic: &str, p: &FetchPartition, replica: Arc<Partition>| {
            checks::leader_epoch(topic, p.partition, p.current_leader_epoch, replica.leader_term()).map(|()| replica)
        };
        let mut seen = SeenPartitions::default();
        let mut targets = Vec::new();
        let mut answers: Answers<FetchOutcome> = Vec::with_capacity(req.topics.len());
        for (ti, t) in req.topics.iter().enumerate() {
            answers.push(TopicAnswers { topic: t.topic.clone(), partitions: Vec::with_capacity(t.partitions.len()) });
            let denied = self.authorize(ctx, ResourceType::Topic, &t.topic).err();
            for p in &t.partitions {
                let max_bytes = match p.max_bytes {
                    0 => DEFAULT_PARTITION_MAX_BYTES,
                    n => n as usize,
                };
                let replica = match &denied {
                    Some(e) => Err(e.clone()),
                    None if seen.first(&t.topic, p.partition) => {
                        local_replica(&self.node, &t.topic, &t.topic_id, p.partition)
                            .and_then(|r| at_epoch(&t.topic, p, r))
                    }
                    None => Err(errors::duplicate_partition(&t.topic, p.partition)),
                };
                targets.push(Target { topic_idx: ti, partition: p.partition, offset: p.offset, max_bytes, replica });
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
            let answer = t.replica.and_then(|r| {
                let budget = if used >= response_budget { 0 } else { t.max_bytes.min(response_budget - used) };
                // (A negative offset is refused by the read below, whatever the budget.)
                if budget == 0 && t.offset >= 0 {
                    // Over the response budget: the partition answered empty; the consumer
                    // fetches it next time.
                    return Ok(FetchOutcome {
                        high_watermark: r.high_watermark(),
                        last_stable_offset: r.last_stable_offset().min(r.high_watermark()),
                        log_start_offset: r.log_start_offset(),
                        next_offset: t.offset as u64,
                        ..FetchOutcome::default()
                    });
                }
                let out = r
                    .fetch(t.offset, budget, isolation)
                    .map_err(|e| errors::partition(&e, |id| self.node.client_addr(id)))?;
                // What was read counts against the budget, returned or not.
                used += out.batches.iter().map(|b| b.data.len()).sum::<usize>();
                Ok(out)
            });
            answers[t.topic_idx].partitions.push((t.partition, answer));
        }
        Ok(answers)
    }

    /// The offset each partition asks for (`spec`), read on its leader here at `isolation`.
    /// Each topic needs Describe.
    pub async fn list_offsets(
        &self,
        ctx: &RequestContext,
        isolation: Isolation,
        topics: Vec<ListOffsetsTopic>,
    ) -> Result<Answers<ListedOffset>, RequestError> {
        let topics = topics.into_iter().map(|t| (t.topic, t.partitions)).collect();
        self.read_on_leaders(ctx, "ListOffsets", topics, |r, &(_, spec)| match spec {
            OffsetSpec::Earliest => r.earliest_offset().map(|o| ListedOffset::at(o, r)),
            OffsetSpec::Latest => r.latest_offset(isolation).map(|o| ListedOffset::end(o, r)),
            OffsetSpec::Timestamp(ms) => r.offset_for_time(ms, isolation).map(|o| ListedOffset::at(o, r)),
            OffsetSpec::RecordTimestamp(ms) => {
                r.offset_for_record_time(ms, isolation).map(|f| ListedOffset::found(f, r))
            }
            OffsetSpec::MaxTimestamp => r.offset_of_max_record_time(isolation).map(|f| ListedOffset::found(f, r)),
        })
    }

    /// Where each asked epoch ended (`OffsetForLeaderEpoch`; Describe on each topic), read on
    /// the partition's leader here: the largest epoch at or below it that holds records, and
    /// the offset after its last record — the high watermark for the leader's own epoch. `None`
    /// (Kafka's undefined epoch and offset) for an epoch newer than the leader's, or none.
    pub fn offsets_for_leader_epochs(
        &self,
        ctx: &RequestContext,
        topics: Vec<EpochQueryTopic>,
    ) -> Result<Answers<Option<(u64, u64)>>, RequestError> {
        let topics = topics.into_iter().map(|t| (t.topic, t.partitions)).collect();
        self.read_on_leaders(ctx, "OffsetForLeaderEpoch", topics, |r, q| match u64::try_from(q.leader_epoch) {
            Err(_) => Ok(None),
            Ok(epoch) => r.end_of_epoch(epoch),
        })
    }

    /// Each query of each topic answered by `read` on the partition's leader here (Describe on
    /// the topic), after the leader epoch a query names, if any, is checked; a partition named
    /// twice in one request is refused on its own.
    fn read_on_leaders<Q: LeaderQuery, T>(
        &self,
        ctx: &RequestContext,
        request: &'static str,
        topics: Vec<(String, Vec<Q>)>,
        read: impl Fn(&Partition, &Q) -> rill_broker::Result<T>,
    ) -> Result<Answers<T>, RequestError> {
        limits::check_counts(request, topics.len(), topics.iter().map(|(_, qs)| qs.len()).sum())?;
        let mut seen = SeenPartitions::default();
        let answers = topics
            .into_iter()
            .map(|(topic, queries)| {
                let denied = self.authorize(ctx, ResourceType::Topic, &topic).err();
                let partitions = queries
                    .iter()
                    .map(|q| {
                        let p = q.partition();
                        let answer = match &denied {
                            Some(e) => Err(e.clone()),
                            None if !seen.first(&topic, p) => Err(errors::duplicate_partition(&topic, p)),
                            None => local_replica(&self.node, &topic, &[], p).and_then(|r| {
                                checks::leader_epoch(&topic, p, q.current_leader_epoch(), r.leader_term())?;
                                read(&r, q).map_err(|e| errors::partition(&e, |id| self.node.client_addr(id)))
                            }),
                        };
                        (p, answer)
                    })
                    .collect();
                TopicAnswers { topic, partitions }
            })
            .collect();
        Ok(answers)
    }

    /// A producer id and epoch. Without a transactional id: a fresh id at epoch 0 (needs
    /// IdempotentWrite on the cluster). With one (needs Write on it), on its coordinator: the
    /// id's producer with its epoch bumped, fencing older instances, or a new producer id when
    /// there is none yet or the epoch would overflow.
    pub async fn init_producer_id(&self, ctx: &RequestContext, req: InitProducerIdRequest) -> Answer<(i64, i16)> {
        if req.transactional_id.is_empty() {
            self.authorize(ctx, ResourceType::Cluster, CLUSTER_RESOURCE)?;
            return self.node.next_producer_id().await.map(|id| (id, 0)).map_err(|e| errors::propose(&e));
        }
        let id = req.transactional_id.as_str();
        self.authorize(ctx, ResourceType::TransactionalId, id)?;
        let expected = match req.current {
            None => None,
            Some((producer_id, epoch)) => match i16::try_from(epoch) {
                Ok(epoch) if producer_id >= 0 && epoch >= 0 => Some((producer_id, epoch)),
                _ => {
                    return Err(errors::invalid_request(format!(
                        "current producer id {producer_id} and epoch {epoch}: an id of at least 0 and a 16-bit epoch of at least 0"
                    )))
                }
            },
        };
        let partition = match coordinator_here(&self.node, PartitionKind::TransactionState, id)? {
            Hosted::Transactions(p) => p,
            _ => return Err(errors::coordinator_not_created(rill_meta::TRANSACTION_STATE_TOPIC)),
        };
        let node = self.node.clone();
        let new_producer_id = move || {
            let node = node.clone();
            async move { node.next_producer_id().await.map_err(|e| e.to_string()) }
        };
        let timeout = INIT_PRODUCER_TIMEOUT;
        let timeout_ms = req.transaction_timeout_ms;
        transactions::init_producer_id(&partition, id, timeout_ms, expected, new_producer_id, timeout)
            .await
            .map_err(|e| errors::coordinator(&e))
    }
}
