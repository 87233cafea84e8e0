//! Transactions on their coordinator (the leader of the `__transaction_state` partition the
//! transactional id hashes to): adding partitions and groups, ending a transaction — whose
//! markers this layer starts, so that no listener can forget them — describing, listing and
//! aborting.

use std::sync::Arc;
use std::time::Duration;

use rill_broker::StatePartition;
use rill_coordinator::transactions::{self, TransactionMetadata, TxnProtocol};
use rill_coordinator::{CoordinatorError, TransactionsMachine};

use super::authz::ResourceType;
use super::checks::{self, NamedPartitions};
use super::limits;
use super::routing::transaction_coordinator;
use super::{Answer, RequestContext, RequestError, Service};
use crate::errors;

/// How long a coordinator's decision may take to be committed.
const DECISION_TIMEOUT: Duration = Duration::from_secs(10);
/// Most transactional ids one `DescribeTransactions` names.
const MAX_DESCRIBED: usize = 1_000;
/// Most states one `ListTransactions` filters by (there are fewer states than this).
const MAX_LISTED_STATES: usize = 16;
/// Most producer ids one `ListTransactions` filters by.
const MAX_LISTED_PRODUCERS: usize = 1_000;
/// How long a coordinator may take to confirm with a quorum that it still leads before it
/// answers `DescribeTransactions` or `ListTransactions`.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A producer in a transaction, as a request names it.
#[derive(Debug, Clone, Default)]
pub struct TxnProducer {
    /// Its transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its epoch, as the wire carries it (checked to fit 16 bits).
    pub producer_epoch: i32,
}

/// How an ended transaction left its producer: the id and epoch to go on with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedTxn {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch now (v2 bumps it at every end).
    pub epoch: i16,
}

/// One transactional id as `ListTransactions` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    /// The id.
    pub transactional_id: String,
    /// Its state's name.
    pub state: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// How long its transaction has been open (ms); -1 when none is.
    pub open_ms: i64,
    /// How many partitions its transaction has.
    pub partitions: u32,
}

/// The filter of a `ListTransactions`.
#[derive(Debug, Clone, Default)]
pub struct ListTransactionsFilter {
    /// Only these states (Kafka's names; a name no state has matches nothing); all when empty.
    pub states: Vec<String>,
    /// Only these producer ids; all when empty.
    pub producer_ids: Vec<i64>,
    /// Only transactions open at least this long (ms); all when 0 or less.
    pub open_longer_than_ms: i64,
}

impl Service {
    /// Adds partitions to the producer's transaction (v1's `AddPartitionsToTxn`; Write on the
    /// transactional id and on each topic). One bad or denied partition refuses them all.
    pub async fn add_partitions_to_txn(
        &self,
        ctx: &RequestContext,
        producer: TxnProducer,
        topics: Vec<NamedPartitions>,
    ) -> Result<Answer<()>, RequestError> {
        let count = topics.iter().map(|t| t.partitions.len()).sum();
        limits::check_counts("AddPartitionsToTxn", topics.len(), count)?;
        Ok(self.add_partitions_checked(ctx, producer, topics).await)
    }

    async fn add_partitions_checked(
        &self,
        ctx: &RequestContext,
        producer: TxnProducer,
        topics: Vec<NamedPartitions>,
    ) -> Answer<()> {
        self.authorize(ctx, ResourceType::TransactionalId, &producer.transactional_id)?;
        for t in &topics {
            self.authorize(ctx, ResourceType::Topic, &t.topic)?;
        }
        let epoch = checks::producer_epoch(producer.producer_epoch)?;
        let partitions = checks::txn_partitions(&self.node.meta(), &topics)?;
        let id = producer.transactional_id.as_str();
        let coordinator = transaction_coordinator(&self.node, id)?;
        let producer = (producer.producer_id, epoch);
        let shard = self.coordinators.transactions().of(&coordinator)?;
        transactions::add_partitions(
            shard.additions(),
            &coordinator,
            id,
            producer,
            &partitions,
            TxnProtocol::V1,
            DECISION_TIMEOUT,
        )
        .await
        .map_err(|e| errors::coordinator(&e))
    }

    /// Adds a consumer group to the producer's transaction, so its offsets can be committed in
    /// it (`AddOffsetsToTxn`; Write on the transactional id, Read on the group).
    pub async fn add_offsets_to_txn(
        &self,
        ctx: &RequestContext,
        producer: TxnProducer,
        group_id: &str,
        transaction_version: u32,
    ) -> Answer<()> {
        self.authorize(ctx, ResourceType::TransactionalId, &producer.transactional_id)?;
        self.authorize(ctx, ResourceType::Group, group_id)?;
        let epoch = checks::producer_epoch(producer.producer_epoch)?;
        let protocol = checks::txn_protocol(transaction_version)?;
        let id = producer.transactional_id.as_str();
        let coordinator = transaction_coordinator(&self.node, id)?;
        let producer = (producer.producer_id, epoch);
        let shard = self.coordinators.transactions().of(&coordinator)?;
        transactions::add_offsets(shard.additions(), &coordinator, id, producer, group_id, protocol, DECISION_TIMEOUT)
            .await
            .map_err(|e| errors::coordinator(&e))
    }

    /// Ends the producer's transaction (`EndTxn`; Write on the transactional id): commits or
    /// aborts it once its `Prepare*` record is committed, then writes its markers in the
    /// background (its coordinator's shard, [`crate::coordinators::TxnShard::finish`]). Answers with the producer's id and epoch to go on
    /// with.
    pub async fn end_txn(
        &self,
        ctx: &RequestContext,
        producer: TxnProducer,
        commit: bool,
        transaction_version: u32,
    ) -> Answer<EndedTxn> {
        self.authorize(ctx, ResourceType::TransactionalId, &producer.transactional_id)?;
        let epoch = checks::producer_epoch(producer.producer_epoch)?;
        let protocol = checks::txn_protocol(transaction_version)?;
        let id = producer.transactional_id;
        let coordinator = transaction_coordinator(&self.node, &id)?;
        let shard = self.coordinators.transactions().of(&coordinator)?;
        let node = self.node.clone();
        let new_producer_id = move || {
            let node = node.clone();
            async move { node.next_producer_id().await.map_err(|e| e.to_string()) }
        };
        let ended = transactions::end_transaction(
            &coordinator,
            &id,
            (producer.producer_id, epoch),
            commit,
            protocol,
            new_producer_id,
            DECISION_TIMEOUT,
        )
        .await
        .map_err(|e| errors::coordinator(&e))?;
        let answer = EndedTxn { producer_id: ended.producer_id, epoch: ended.epoch };
        if let Some(prepared) = ended.to_mark {
            shard.finish(id, prepared);
        }
        Ok(answer)
    }

    /// Aborts whatever transaction `transactional_id` has open, fencing its producer (Write on
    /// the id), then writes its markers in the background. For an operator unsticking a hanging
    /// transaction.
    pub async fn abort_transaction(&self, ctx: &RequestContext, transactional_id: &str) -> Answer<()> {
        self.authorize(ctx, ResourceType::TransactionalId, transactional_id)?;
        let coordinator = transaction_coordinator(&self.node, transactional_id)?;
        let shard = self.coordinators.transactions().of(&coordinator)?;
        let prepared = transactions::abort_open(&coordinator, transactional_id, DECISION_TIMEOUT)
            .await
            .map_err(|e| errors::coordinator(&e))?;
        shard.finish(transactional_id.to_string(), prepared);
        Ok(())
    }

    /// Each of `ids` described, in order (Describe on each): read from its coordinator
    /// partition once this node's leadership of it is confirmed by a quorum (one confirmation
    /// per partition, all at once).
    pub async fn describe_transactions(
        &self,
        ctx: &RequestContext,
        ids: &[String],
    ) -> Result<Vec<(String, Answer<TransactionMetadata>)>, RequestError> {
        if ids.len() > MAX_DESCRIBED {
            let (request, what, count, max) = ("DescribeTransactions", "transactional ids", ids.len(), MAX_DESCRIBED);
            return Err(RequestError::TooManyEntries { request, what, count, max });
        }
        let mut partitions: Vec<(Arc<StatePartition<TransactionsMachine>>, Vec<usize>)> = Vec::new();
        let mut described: Vec<Option<Answer<TransactionMetadata>>> = vec![None; ids.len()];
        for (i, id) in ids.iter().enumerate() {
            let coordinator = self
                .authorize(ctx, ResourceType::TransactionalId, id)
                .and_then(|()| transaction_coordinator(&self.node, id));
            match coordinator {
                Ok(c) => match partitions.iter_mut().find(|(p, _)| Arc::ptr_eq(p, &c)) {
                    Some((_, asked)) => asked.push(i),
                    None => partitions.push((c, vec![i])),
                },
                Err(e) => described[i] = Some(Err(e)),
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
                        described[i] = Some(record.ok_or_else(|| {
                            errors::coordinator(&CoordinatorError::TransactionalIdNotFound(ids[i].clone()))
                        }));
                    }
                }
                Err(e) => {
                    let e = errors::coordinator(&e);
                    for &i in asked {
                        described[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        Ok(ids.iter().cloned().zip(described.into_iter().flatten()).collect())
    }

    /// The transactional ids of every coordinator partition this node leads that pass `filter`
    /// and the caller may describe, sorted by id. Each leader answers once a quorum confirms it
    /// still leads (the partitions' confirmations run together); a replica that is not the
    /// leader is left out (the client asks every leader); a leader that cannot answer fails the
    /// listing, which would otherwise look complete without its transactions.
    pub async fn list_transactions(
        &self,
        ctx: &RequestContext,
        filter: ListTransactionsFilter,
    ) -> Result<Answer<Vec<TransactionListing>>, RequestError> {
        if filter.states.len() > MAX_LISTED_STATES {
            let (request, what, count, max) = ("ListTransactions", "states", filter.states.len(), MAX_LISTED_STATES);
            return Err(RequestError::TooManyEntries { request, what, count, max });
        }
        if filter.producer_ids.len() > MAX_LISTED_PRODUCERS {
            let (request, what, count, max) =
                ("ListTransactions", "producer ids", filter.producer_ids.len(), MAX_LISTED_PRODUCERS);
            return Err(RequestError::TooManyEntries { request, what, count, max });
        }
        let now = rill_rt::wall_clock_ms();
        let replicas = self.node.transactions_replicas();
        let reads = replicas.iter().map(|p| {
            transactions::read(p, READ_TIMEOUT, |state| {
                state
                    .iter()
                    .map(|(id, r)| {
                        let open = r.state.is_open();
                        TransactionListing {
                            transactional_id: id.clone(),
                            state: r.state.name().to_string(),
                            producer_id: r.producer_id,
                            producer_epoch: r.epoch,
                            open_ms: if open { now.saturating_sub(r.txn_start_ms).max(0) } else { -1 },
                            partitions: r.partitions.values().map(|ps| ps.len() as u32).sum(),
                        }
                    })
                    .collect::<Vec<_>>()
            })
        });
        let mut listed = Vec::new();
        for read in futures::future::join_all(reads).await {
            let transactions = match read {
                Ok(transactions) => transactions,
                Err(CoordinatorError::NotCoordinator { .. }) => continue,
                Err(e) => return Ok(Err(errors::coordinator(&e))),
            };
            listed.extend(transactions.into_iter().filter(|t| {
                (filter.states.is_empty() || filter.states.contains(&t.state))
                    && (filter.producer_ids.is_empty() || filter.producer_ids.contains(&t.producer_id))
                    && (filter.open_longer_than_ms <= 0 || t.open_ms >= filter.open_longer_than_ms)
                    && self.lists(ctx, ResourceType::TransactionalId, &t.transactional_id)
            }));
        }
        listed.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(Ok(listed))
    }
}
