//! The `Transactions` service from the client: ending and describing transactions at a
//! transactional id's coordinator (following `NOT_COORDINATOR`, retrying while it loads or while
//! it writes the markers of the id's previous transaction, `CONCURRENT_TRANSACTIONS`).

use rill_proto::common::ErrorCode;
use rill_proto::transactions::transactions_client::TransactionsClient;
use rill_proto::transactions::{
    AbortTransactionRequest, AddOffsetsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest,
    ListTransactionsRequest, TransactionDescription, TransactionListing,
};
use tonic::transport::Channel;

use crate::client::MAX_MESSAGE_BYTES;
use crate::coordinator::{answer_within, check, coordinator_retriable, Coordinator};
use crate::error::{Error, Result};
use crate::Client;

/// First pause before retrying a request refused `CONCURRENT_TRANSACTIONS` (Kafka's clients wait
/// 20 ms): the previous transaction's markers usually land within a few milliseconds.
const CONCURRENT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(10);
/// Longest pause between those retries: a commit's next transaction must not wait long after
/// its markers landed.
const CONCURRENT_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_millis(100);

impl Client {
    fn transactions_stub(&self, addr: &str) -> Result<TransactionsClient<Channel>> {
        Ok(TransactionsClient::new(self.channel(addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Runs `attempt` again while it fails `CONCURRENT_TRANSACTIONS` (the id's previous
    /// transaction is still being completed), within the retry budget.
    pub(crate) async fn while_concurrent<T, F, Fut>(&self, attempt: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        self.while_code(ErrorCode::ConcurrentTransactions, attempt).await
    }

    /// Runs `attempt` again while it fails with `code` (a state that passes by itself: a
    /// transaction being completed), backing off, within the retry budget.
    pub(crate) async fn while_code<T, F, Fut>(&self, code: ErrorCode, attempt: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        self.while_failing(|e| e.code() == Some(code), attempt).await
    }

    /// Runs `attempt` again while it fails with an error `again` accepts, backing off, within
    /// the retry budget.
    pub(crate) async fn while_failing<T, F, Fut>(&self, again: impl Fn(&Error) -> bool, attempt: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = rill_rt::now() + self.options().retry_budget;
        let mut pause = CONCURRENT_BACKOFF;
        loop {
            match attempt().await {
                Err(e) if again(&e) && rill_rt::now() < deadline => {
                    rill_rt::sleep(pause).await;
                    pause = (pause * 2).min(CONCURRENT_BACKOFF_MAX);
                }
                other => return other,
            }
        }
    }

    /// Commits (`commit`) or aborts the transaction of `transactional_id` under the producer id
    /// and epoch `producer`; returns the pair its next transaction runs under (one epoch up
    /// with transactions v2).
    pub async fn end_transaction(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> Result<(i64, i16)> {
        let req = EndTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.0,
            producer_epoch: i32::from(producer.1),
            commit,
            transaction_version: crate::client::TRANSACTION_VERSION,
        };
        let wait = self.options().request_slack * 3;
        self.while_concurrent(|| {
            self.at_coordinator(Coordinator::Transaction, transactional_id, |addr| {
                let req = req.clone();
                async move {
                    let mut stub = self.transactions_stub(&addr)?;
                    let r = answer_within(&addr, wait, stub.end_txn(req)).await?;
                    if let Err(f) = check(r.error_code, r.error_message, r.coordinator) {
                        return Ok(Err(f));
                    }
                    let epoch = i16::try_from(r.producer_epoch)
                        .map_err(|_| Error::Transport(format!("producer epoch {} beyond 16 bits", r.producer_epoch)))?;
                    Ok(Ok((r.producer_id, epoch)))
                }
            })
        })
        .await
    }

    /// Adds consumer group `group` to the transaction of `transactional_id`'s `producer` (id,
    /// epoch), beginning one when none is open (Kafka's AddOffsetsToTxn): offsets then committed
    /// for the group in the transaction ([`Client::txn_commit_offsets`]) count only if it
    /// commits.
    pub async fn add_offsets_to_transaction(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        group: &str,
    ) -> Result<()> {
        let req = AddOffsetsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.0,
            producer_epoch: i32::from(producer.1),
            group_id: group.to_string(),
            transaction_version: crate::client::TRANSACTION_VERSION,
        };
        let wait = self.options().request_slack * 3;
        self.while_concurrent(|| {
            self.at_coordinator(Coordinator::Transaction, transactional_id, |addr| {
                let req = req.clone();
                async move {
                    let mut stub = self.transactions_stub(&addr)?;
                    let r = answer_within(&addr, wait, stub.add_offsets_to_txn(req)).await?;
                    Ok(check(r.error_code, r.error_message, r.coordinator))
                }
            })
        })
        .await
    }

    /// Every transactional id of the cluster (each node lists those of the
    /// `__transaction_state` partitions it leads, so every partition's leader is asked), in
    /// `states` when not empty, open at least `open_longer_than` when set. A listing a leader
    /// could not give yet (leadership moving, a new leader loading, no quorum confirming it, a
    /// node unreachable) is asked for again, within the client's retry budget.
    pub async fn list_transactions(
        &self,
        states: &[String],
        open_longer_than: Option<std::time::Duration>,
    ) -> Result<Vec<TransactionListing>> {
        self.while_failing(coordinator_retriable, || self.list_transactions_once(states, open_longer_than)).await
    }

    async fn list_transactions_once(
        &self,
        states: &[String],
        open_longer_than: Option<std::time::Duration>,
    ) -> Result<Vec<TransactionListing>> {
        let topic = self.describe_topic(crate::coordinator::TRANSACTION_STATE_TOPIC).await?;
        if topic.partitions.iter().any(|p| p.leader.is_none()) {
            return Err(crate::error::server(
                ErrorCode::CoordinatorNotAvailable as i32,
                format!(
                    "a partition of {} has no leader right now; retry",
                    crate::coordinator::TRANSACTION_STATE_TOPIC
                ),
            ));
        }
        let leaders: std::collections::BTreeSet<u64> = topic.partitions.iter().filter_map(|p| p.leader).collect();
        let nodes = self.describe_cluster().await?.nodes;
        let wait = self.options().request_slack * 3;
        let req = ListTransactionsRequest {
            states: states.to_vec(),
            open_longer_than_ms: open_longer_than.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        };
        let mut out = std::collections::BTreeMap::new();
        for node in leaders {
            let addr = nodes
                .iter()
                .find(|n| n.node_id == node && !n.address.is_empty())
                .map(|n| n.address.clone())
                .ok_or_else(|| Error::Transport(format!("node {node} has no known address")))?;
            let mut stub = self.transactions_stub(&addr)?;
            let resp = answer_within(&addr, wait, stub.list_transactions(req.clone())).await?;
            if resp.error_code != ErrorCode::None as i32 {
                return Err(crate::error::server(resp.error_code, resp.error_message));
            }
            for t in resp.transactions {
                out.insert(t.transactional_id.clone(), t);
            }
        }
        Ok(out.into_values().collect())
    }

    /// Aborts `transactional_id`'s open transaction at its coordinator (fencing its producer).
    pub async fn abort_open_transaction(&self, transactional_id: &str) -> Result<()> {
        let req = AbortTransactionRequest { transactional_id: transactional_id.to_string() };
        let wait = self.options().request_slack * 3;
        self.at_coordinator(Coordinator::Transaction, transactional_id, |addr| {
            let req = req.clone();
            async move {
                let mut stub = self.transactions_stub(&addr)?;
                let r = answer_within(&addr, wait, stub.abort_transaction(req)).await?;
                Ok(check(r.error_code, r.error_message, r.coordinator))
            }
        })
        .await
    }

    /// The record of `transactional_id` at its coordinator: state, producer, open partitions.
    pub async fn describe_transaction(&self, transactional_id: &str) -> Result<TransactionDescription> {
        let req = DescribeTransactionsRequest { transactional_ids: vec![transactional_id.to_string()] };
        // The coordinator first confirms with a quorum that it still leads (up to 5 s).
        let wait = self.options().request_slack * 3;
        self.at_coordinator(Coordinator::Transaction, transactional_id, |addr| {
            let req = req.clone();
            async move {
                let mut stub = self.transactions_stub(&addr)?;
                let mut r = answer_within(&addr, wait, stub.describe_transactions(req)).await?;
                let Some(mut d) = r.transactions.pop() else {
                    return Err(Error::Transport(format!("{addr} described no transaction")));
                };
                if let Err(f) = check(d.error_code, std::mem::take(&mut d.error_message), d.coordinator.take()) {
                    return Ok(Err(f));
                }
                Ok(Ok(d))
            }
        })
        .await
    }
}
