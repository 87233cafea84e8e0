//! [`TransactionalProducer`]: a [`Producer`] whose sends belong to transactions — all of a
//! transaction's records become visible to `read_committed` consumers together, or none do.
//!
//! ```text
//!  init_transactions ─► begin ─► send … send ─► [send_offsets_to_transaction] ─► commit ─► begin …
//!                                                                             └─► abort ──┘
//! ```
//!
//! A consume-transform-produce job commits what it consumed in the same transaction as what
//! it produced ([`TransactionalProducer::send_offsets_to_transaction`], KIP-447): the group's
//! offsets move if and only if the output commits.
//!
//! Rill's client speaks transactions v2 (KIP-890): a partition joins the transaction with its
//! first batch (the partition's leader adds it at the coordinator before appending), and every
//! commit or abort bumps the producer's epoch, so nothing sent in one transaction can land in
//! the next. Errors are classified with [`Error::transaction_kind`]: *retriable* (call again),
//! *abortable* (a send failed: abort, then begin again) or *fatal* (a newer instance with the
//! same transactional id fenced this one: close it).

use std::sync::Mutex;
use std::time::Duration;

use crate::consumer::{ConsumerGroupMetadata, TopicPartition};
use crate::error::{Error, Result, TransactionErrorKind};
use crate::producer::{DeliveryFuture, Producer, ProducerConfig};
use crate::record::Record;
use crate::Client;

/// The last epoch a coordinator gives one producer id (Kafka keeps `i16::MAX` for itself).
const LAST_EPOCH: i16 = i16::MAX - 1;

/// Where the producer is between calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `init_transactions` has not succeeded yet.
    Uninitialised,
    /// Ready to `begin`.
    Ready,
    /// In a transaction: sends are allowed.
    InTransaction,
    /// Committing or aborting: sends wait for the next transaction.
    Ending,
    /// Fenced or otherwise unusable.
    Failed,
}

/// A transactional producer (see the module docs). Not `Clone`: one instance per
/// transactional id at a time.
pub struct TransactionalProducer {
    client: Client,
    producer: Producer,
    transactional_id: String,
    timeout: Duration,
    phase: Mutex<Phase>,
    /// The current transaction's offsets.
    offsets: Mutex<TxnOffsets>,
}

/// What the current transaction did with consumer offsets.
#[derive(Debug, Default)]
struct TxnOffsets {
    /// A group joined the transaction (it has something to end even when no record was sent).
    added: bool,
    /// The last `send_offsets_to_transaction` failed: the transaction must not commit without
    /// the offsets (the outcome of a retriable failure is unknown until a retry succeeds).
    failed: Option<Error>,
}

impl TransactionalProducer {
    /// A producer for `transactional_id`; its transactions are aborted by the coordinator when
    /// open longer than `transaction_timeout` (at most 15 minutes). Call
    /// [`TransactionalProducer::init_transactions`] first.
    pub fn new(client: Client, config: ProducerConfig, transactional_id: &str, transaction_timeout: Duration) -> Self {
        let producer = Producer::with_transactional_id(client.clone(), config, Some(transactional_id.to_string()));
        Self {
            client,
            producer,
            transactional_id: transactional_id.to_string(),
            timeout: transaction_timeout,
            phase: Mutex::new(Phase::Uninitialised),
            offsets: Mutex::new(TxnOffsets::default()),
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_phase(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase;
    }

    fn misuse(&self, what: &str) -> Error {
        Error::InvalidArgument(format!("{what}: the producer of {:?} is {:?}", self.transactional_id, self.phase()))
    }

    /// Gets the transactional id's producer id and a new epoch from its coordinator, which
    /// fences every older instance and aborts a transaction one of them left open (retrying
    /// while that abort completes).
    pub async fn init_transactions(&self) -> Result<()> {
        if !matches!(self.phase(), Phase::Uninitialised | Phase::Ready) {
            return Err(self.misuse("init_transactions"));
        }
        self.initialise().await?;
        self.set_phase(Phase::Ready);
        Ok(())
    }

    async fn initialise(&self) -> Result<()> {
        let timeout_ms = u32::try_from(self.timeout.as_millis()).unwrap_or(u32::MAX).max(1);
        let identity = self
            .client
            .while_concurrent(|| self.client.init_transactional_producer(&self.transactional_id, timeout_ms))
            .await?;
        self.producer.start_epoch(identity);
        Ok(())
    }

    /// Begins a transaction.
    pub fn begin_transaction(&self) -> Result<()> {
        if self.phase() != Phase::Ready {
            return Err(self.misuse("begin_transaction"));
        }
        *self.offsets_state() = TxnOffsets::default();
        self.set_phase(Phase::InTransaction);
        Ok(())
    }

    /// Queues `record` for `topic` in the current transaction (partitioned as
    /// [`Producer::send`] does).
    pub async fn send(&self, topic: &str, record: Record) -> Result<DeliveryFuture> {
        if self.phase() != Phase::InTransaction {
            return Err(self.misuse("send"));
        }
        self.producer.send(topic, record).await
    }

    /// Queues `record` for `topic`/`partition` in the current transaction.
    pub async fn send_to(&self, topic: &str, partition: u32, record: Record) -> Result<DeliveryFuture> {
        if self.phase() != Phase::InTransaction {
            return Err(self.misuse("send_to"));
        }
        self.producer.send_to(topic, partition, record).await
    }

    /// Commits `offsets` (per partition, the next offset to read) of the consumer group
    /// `group` in the current transaction: they become the group's committed offsets if the
    /// transaction commits, and are dropped if it aborts (Kafka's `sendOffsetsToTransaction`).
    /// Until then they are pending: `FetchOffsets` shows the previous offsets, and a
    /// `read_committed` consumer taking a partition over waits for the transaction to end.
    /// `group` comes from [`crate::Consumer::group_metadata`]: a subscribed consumer's commit
    /// is refused once it is no longer the member owning those partitions at that epoch.
    /// The records sent so far stop lingering and leave at once: their writes overlap the
    /// offsets' instead of waiting for `commit_transaction`.
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, u64)],
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        if self.phase() != Phase::InTransaction {
            return Err(self.misuse("send_offsets_to_transaction"));
        }
        if offsets.is_empty() {
            return Ok(());
        }
        if let Some((tp, o)) = offsets.iter().find(|(_, o)| i64::try_from(*o).is_err()) {
            return Err(Error::InvalidArgument(format!("offset {o} of {}/{} is too large", tp.topic, tp.partition)));
        }
        let Some(identity) = self.producer.identity() else { return Err(self.misuse("send_offsets_to_transaction")) };
        // The transaction is about to end: its buffered records leave now and replicate while
        // the offsets are committed, instead of lingering until `commit_transaction` flushes.
        self.producer.send_buffered_now();
        // The group joins the transaction with the commit (transactions v2): from the request
        // on, the transaction may hold it, so ending it sends EndTxn even without records.
        self.offsets_state().added = true;
        let result = async {
            let offsets: Vec<(TopicPartition, u64, String)> =
                offsets.iter().map(|(tp, o)| (tp.clone(), *o, String::new())).collect();
            let member = group.member.as_ref().map(|(id, epoch)| (id.as_str(), *epoch));
            self.client.txn_commit_offsets(&self.transactional_id, identity, &group.group_id, member, &offsets).await
        };
        let outcome = result.await;
        let mut state = self.offsets_state();
        match outcome {
            Ok(()) => {
                // A retry after a retriable failure succeeded: the offsets are in.
                if state.failed.as_ref().is_some_and(|e| e.transaction_kind() == TransactionErrorKind::Retriable) {
                    state.failed = None;
                }
                Ok(())
            }
            Err(e) if e.transaction_kind() == TransactionErrorKind::Fatal => {
                drop(state);
                self.set_phase(Phase::Failed);
                Err(e)
            }
            // Perhaps in, perhaps not: the transaction commits only after a retry succeeds.
            Err(e) if e.transaction_kind() == TransactionErrorKind::Retriable => {
                if state.failed.is_none() {
                    state.failed = Some(e.clone());
                }
                Err(e)
            }
            // The offsets are not (all) in the transaction: committing it would move the output
            // without the input. Abort.
            Err(e) => {
                let e = Error::TransactionAbortable(Box::new(e));
                state.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    fn offsets_state(&self) -> std::sync::MutexGuard<'_, TxnOffsets> {
        self.offsets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends everything queued, then commits the transaction. When a send of the transaction
    /// failed, or its offsets could not be sent (`send_offsets_to_transaction` failed and no
    /// retry succeeded), nothing is committed: the error is returned (abortable — call
    /// [`TransactionalProducer::abort_transaction`]).
    pub async fn commit_transaction(&self) -> Result<()> {
        if self.phase() != Phase::InTransaction {
            return Err(self.misuse("commit_transaction"));
        }
        self.set_phase(Phase::Ending);
        self.producer.flush().await;
        let (failed, sent) = self.producer.transaction_outcome();
        if let Some(e) = failed {
            let e = Error::TransactionAbortable(Box::new(e));
            self.set_phase(if e.transaction_kind() == TransactionErrorKind::Fatal {
                Phase::Failed
            } else {
                Phase::InTransaction
            });
            return Err(e);
        }
        let offsets_failed = self.offsets_state().failed.clone();
        if let Some(e) = offsets_failed {
            self.set_phase(Phase::InTransaction);
            return Err(match e {
                e @ Error::TransactionAbortable(_) => e,
                e => Error::TransactionAbortable(Box::new(e)),
            });
        }
        if sent || self.offsets_added() {
            if let Err(e) = self.end(true).await {
                if e.transaction_kind() != TransactionErrorKind::Fatal {
                    self.set_phase(Phase::InTransaction);
                }
                return Err(e);
            }
        }
        self.set_phase(Phase::Ready);
        Ok(())
    }

    /// Aborts the transaction: what was sent in it is never visible to `read_committed`
    /// consumers. Records still queued are sent first (and aborted with the rest).
    pub async fn abort_transaction(&self) -> Result<()> {
        if self.phase() != Phase::InTransaction {
            return Err(self.misuse("abort_transaction"));
        }
        self.set_phase(Phase::Ending);
        self.producer.flush().await;
        let (failed, sent) = self.producer.transaction_outcome();
        if let Some(e) = failed.filter(|e| e.transaction_kind() == TransactionErrorKind::Fatal) {
            self.set_phase(Phase::Failed);
            return Err(e);
        }
        if sent || self.offsets_added() {
            if let Err(e) = self.end(false).await {
                if e.transaction_kind() != TransactionErrorKind::Fatal {
                    self.set_phase(Phase::InTransaction);
                }
                return Err(e);
            }
        }
        self.set_phase(Phase::Ready);
        Ok(())
    }

    fn offsets_added(&self) -> bool {
        self.offsets_state().added
    }

    async fn end(&self, commit: bool) -> Result<()> {
        let Some(identity) = self.producer.identity() else { return Err(self.misuse("end")) };
        let ended = self.client.end_transaction(&self.transactional_id, identity, commit).await;
        if ended.is_ok() {
            *self.offsets_state() = TxnOffsets::default();
        }
        match ended {
            Ok(next) if next == identity && identity.1 >= LAST_EPOCH => {
                // The epoch could not grow (it reached its 16-bit limit) and the coordinator, of
                // a release before v2 ends moved to a new producer id themselves, answered the
                // same pair: InitProducerId gives a new one once this transaction completed.
                self.initialise().await
            }
            Ok(next) => {
                self.producer.start_epoch(next);
                Ok(())
            }
            Err(e) => {
                if e.transaction_kind() == TransactionErrorKind::Fatal {
                    self.set_phase(Phase::Failed);
                }
                Err(e)
            }
        }
    }

    /// The producer id and epoch in use.
    pub fn producer_id_and_epoch(&self) -> Option<(i64, i16)> {
        self.producer.identity()
    }

    /// Stops the producer; a transaction left open is aborted by its coordinator after the
    /// transaction timeout, or at once by the next instance's `init_transactions`.
    pub async fn close(self) {
        self.producer.close().await;
    }
}
