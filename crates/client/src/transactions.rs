//! The `Transactions` service from the client: ending and describing transactions at a
//! transactional id's coordinator (following `NOT_COORDINATOR`, retrying while it loads or while
//! it writes the markers of the id's previous transaction, `CONCURRENT_TRANSACTIONS`).

use rill_proto::common::ErrorCode;
use rill_proto::transactions::transactions_client::TransactionsClient;
use rill_proto::transactions::{DescribeTransactionsRequest, EndTxnRequest, TransactionDescription};
use tonic::transport::Channel;

use crate::coordinator::{answer_within, check, Coordinator};
use crate::error::{Error, Result};
use crate::Client;

/// Pause between retries of a request refused `CONCURRENT_TRANSACTIONS`.
const CONCURRENT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);

impl Client {
    fn transactions_stub(&self, addr: &str) -> Result<TransactionsClient<Channel>> {
        Ok(TransactionsClient::new(self.channel(addr)?))
    }

    /// Runs `attempt` again while it fails `CONCURRENT_TRANSACTIONS` (the id's previous
    /// transaction is still being completed), within the retry budget.
    pub(crate) async fn while_concurrent<T, F, Fut>(&self, attempt: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = rill_rt::now() + self.options().retry_budget;
        let mut pause = CONCURRENT_BACKOFF;
        loop {
            match attempt().await {
                Err(e) if e.code() == Some(ErrorCode::ConcurrentTransactions) && rill_rt::now() < deadline => {
                    rill_rt::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(500));
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

    /// The record of `transactional_id` at its coordinator: state, producer, open partitions.
    pub async fn describe_transaction(&self, transactional_id: &str) -> Result<TransactionDescription> {
        let req = DescribeTransactionsRequest { transactional_ids: vec![transactional_id.to_string()] };
        let wait = self.options().request_slack;
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
