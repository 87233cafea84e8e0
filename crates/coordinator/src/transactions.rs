//! The `transaction-state` kind: each transactional id's producer id and epoch, in the
//! partition of `__transaction_state` the id hashes to.
//!
//! `InitProducerId` with a transactional id gives the id's producer id with its epoch bumped
//! (Kafka's 16-bit epoch), so a producer restarted under the same id fences every older
//! instance: partitions refuse the older epoch's batches (`INVALID_PRODUCER_EPOCH`). When the
//! epoch would overflow, the id gets a new producer id at epoch 0 (KIP-360). The coordinator
//! decides the new pair from its state and proposes it as a compare-and-set on the pair it saw,
//! so two decisions racing (two requests, or two leaders across an election) never both apply.
//! Transactions themselves (their states, markers) come with transactions; today the id's
//! transaction timeout is recorded for them.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rill_broker::StatePartition;
use rill_proto::coordinator as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};

use crate::error::{CoordinatorError, Result};

/// Kafka's `transaction.max.timeout.ms` default: the longest transaction timeout accepted.
pub const MAX_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// The transaction timeout when a producer asks for none (Kafka's producer default).
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest transactional id accepted (bytes).
pub const MAX_TRANSACTIONAL_ID_BYTES: usize = 255;
/// The last epoch handed out under one producer id; the next init gets a new id (Kafka keeps
/// `Short.MAX_VALUE` itself for its own use, as do we).
pub const LAST_EPOCH: i16 = i16::MAX - 1;
/// How often a compare-and-set that lost a race is retried before giving up.
const CAS_ATTEMPTS: usize = 5;

const APPLIED: &[u8] = b"ok";
const CONFLICT: &[u8] = b"conflict";

/// A transactional id's producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionalProducer {
    /// Producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// The transaction timeout its producer asked for.
    pub transaction_timeout_ms: u32,
    /// The coordinator's clock when it was last initialised.
    pub updated_ms: i64,
}

impl TransactionalProducer {
    /// The producer a stored message describes, with its epoch already checked to fit 16 bits.
    fn stored(p: &pb::TransactionalProducer, epoch: i16) -> Self {
        Self {
            producer_id: p.producer_id,
            epoch,
            transaction_timeout_ms: p.transaction_timeout_ms,
            updated_ms: p.updated_ms,
        }
    }
}

/// Every transactional id of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransactionsState {
    ids: BTreeMap<String, TransactionalProducer>,
}

impl TransactionsState {
    /// The producer of `transactional_id`.
    pub fn get(&self, transactional_id: &str) -> Option<&TransactionalProducer> {
        self.ids.get(transactional_id)
    }

    /// Number of transactional ids.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Applies a compare-and-set; true when it took effect.
    fn apply(&mut self, c: pb::InitProducer) -> bool {
        let Some(p) = c.producer else { return false };
        let Ok(epoch) = i16::try_from(p.epoch) else { return false };
        let current = self.ids.get(&p.transactional_id).map(|t| (t.producer_id, i32::from(t.epoch)));
        let expected = (c.expect_producer_id >= 0).then_some((c.expect_producer_id, c.expect_epoch));
        if current != expected {
            return false;
        }
        let stored = TransactionalProducer::stored(&p, epoch);
        self.ids.insert(p.transactional_id, stored);
        true
    }
}

fn producer_to(id: &str, t: &TransactionalProducer) -> pb::TransactionalProducer {
    pb::TransactionalProducer {
        transactional_id: id.to_string(),
        producer_id: t.producer_id,
        epoch: i32::from(t.epoch),
        transaction_timeout_ms: t.transaction_timeout_ms,
        updated_ms: t.updated_ms,
    }
}

/// The state machine of a `__transaction_state` partition.
#[derive(Debug, Default)]
pub struct TransactionsMachine {
    state: TransactionsState,
}

impl TransactionsMachine {
    /// An empty machine.
    pub fn new() -> Self {
        Self::default()
    }

    /// The state.
    pub fn state(&self) -> &TransactionsState {
        &self.state
    }
}

impl GroupStateMachine for TransactionsMachine {
    fn apply(&mut self, log_id: &LogId, _base: u64, payload: &Payload) -> Bytes {
        let applied = match pb::TransactionsCommand::decode(payload.body.clone()).map(|c| c.command) {
            Ok(Some(pb::transactions_command::Command::InitProducer(c))) => self.state.apply(c),
            Ok(None) | Err(_) => {
                tracing::error!(index = log_id.index, "undecodable transactions command; skipped");
                false
            }
        };
        Bytes::from_static(if applied { APPLIED } else { CONFLICT })
    }

    fn snapshot(&self) -> Result<Bytes, String> {
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::EmptyStateSnapshot) {
            // Deliberate bug (simulation only): the snapshot loses the state.
            return Ok(Bytes::new());
        }
        let producers = self.state.ids.iter().map(|(id, t)| producer_to(id, t)).collect();
        Ok(pb::TransactionsSnapshot { producers }.encode_to_vec().into())
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        let s =
            pb::TransactionsSnapshot::decode(data).map_err(|e| format!("undecodable transactions snapshot: {e}"))?;
        let mut ids = BTreeMap::new();
        for p in s.producers {
            let epoch = i16::try_from(p.epoch)
                .map_err(|_| format!("{}: epoch {} beyond 16 bits", p.transactional_id, p.epoch))?;
            let stored = TransactionalProducer::stored(&p, epoch);
            ids.insert(p.transactional_id, stored);
        }
        self.state = TransactionsState { ids };
        Ok(())
    }
}

/// Checks a transactional id and a requested timeout (0: the default); returns the timeout.
pub fn validate(transactional_id: &str, timeout_ms: u32) -> Result<u32> {
    if transactional_id.is_empty() || transactional_id.len() > MAX_TRANSACTIONAL_ID_BYTES {
        return Err(CoordinatorError::InvalidRequest(format!(
            "a transactional id has 1 to {MAX_TRANSACTIONAL_ID_BYTES} bytes, got {}",
            transactional_id.len()
        )));
    }
    let max = MAX_TRANSACTION_TIMEOUT.as_millis() as u32;
    match timeout_ms {
        0 => Ok(DEFAULT_TRANSACTION_TIMEOUT.as_millis() as u32),
        t if t > max => {
            Err(CoordinatorError::InvalidTransactionTimeout { got_ms: u64::from(t), max_ms: u64::from(max) })
        }
        t => Ok(t),
    }
}

/// The next producer of a transactional id whose current one is `current`: the same id one
/// epoch up, or `fresh_id` at epoch 0 (none yet, or the epoch would pass [`LAST_EPOCH`]).
pub fn next_producer(current: Option<&TransactionalProducer>, fresh_id: i64) -> (i64, i16) {
    match current {
        Some(t) if t.epoch < LAST_EPOCH => (t.producer_id, t.epoch + 1),
        _ => (fresh_id, 0),
    }
}

/// On `partition`'s leader (the id's coordinator): gives `transactional_id` its next producer
/// id and epoch (see the module docs). `new_producer_id` allocates a never-used producer id;
/// it is called only when one is needed.
pub async fn init_producer_id<F, Fut>(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    timeout_ms: u32,
    new_producer_id: F,
    timeout: Duration,
) -> Result<(i64, i16)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<i64, String>>,
{
    let timeout_ms = validate(transactional_id, timeout_ms)?;
    for _ in 0..CAS_ATTEMPTS {
        let current = partition.read(|m| m.state().get(transactional_id).copied())?;
        let needs_fresh = current.is_none_or(|t| t.epoch >= LAST_EPOCH);
        let fresh = if needs_fresh { new_producer_id().await.map_err(CoordinatorError::NotAvailable)? } else { -1 };
        let (producer_id, epoch) = next_producer(current.as_ref(), fresh);
        let command = pb::TransactionsCommand {
            command: Some(pb::transactions_command::Command::InitProducer(pb::InitProducer {
                producer: Some(pb::TransactionalProducer {
                    transactional_id: transactional_id.to_string(),
                    producer_id,
                    epoch: i32::from(epoch),
                    transaction_timeout_ms: timeout_ms,
                    updated_ms: rill_rt::wall_clock_ms(),
                }),
                expect_producer_id: current.map_or(-1, |t| t.producer_id),
                expect_epoch: current.map_or(-1, |t| i32::from(t.epoch)),
            })),
        };
        let answer = partition.propose(command.encode_to_vec().into(), timeout).await?;
        if answer.as_ref() == APPLIED {
            return Ok((producer_id, epoch));
        }
        // Another init of this id got in first: decide again from the state it left.
    }
    Err(CoordinatorError::NotAvailable(format!(
        "{transactional_id}: {CAS_ATTEMPTS} concurrent initialisations in a row; retry"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(id: &str, pid: i64, epoch: i16, expect: Option<(i64, i16)>) -> Payload {
        let c = pb::InitProducer {
            producer: Some(pb::TransactionalProducer {
                transactional_id: id.into(),
                producer_id: pid,
                epoch: i32::from(epoch),
                transaction_timeout_ms: 60_000,
                updated_ms: 1,
            }),
            expect_producer_id: expect.map_or(-1, |e| e.0),
            expect_epoch: expect.map_or(-1, |e| i32::from(e.1)),
        };
        let body = pb::TransactionsCommand { command: Some(pb::transactions_command::Command::InitProducer(c)) };
        Payload { units: 0, body: body.encode_to_vec().into(), proposal: 0 }
    }

    #[test]
    fn epochs_bump_as_a_compare_and_set_and_overflow_to_a_new_id() {
        let id = LogId::default();
        let mut m = TransactionsMachine::new();
        assert_eq!(m.apply(&id, 0, &init("t", 7, 0, None)), Bytes::from_static(APPLIED));
        assert_eq!(m.apply(&id, 0, &init("t", 7, 1, None)), Bytes::from_static(CONFLICT), "expected none, has one");
        assert_eq!(m.apply(&id, 0, &init("t", 7, 1, Some((7, 0)))), Bytes::from_static(APPLIED));
        assert_eq!(m.apply(&id, 0, &init("t", 7, 2, Some((7, 0)))), Bytes::from_static(CONFLICT), "a stale decision");
        assert_eq!(m.state().get("t").map(|t| (t.producer_id, t.epoch)), Some((7, 1)));

        let current = m.state().get("t").copied();
        assert_eq!(next_producer(current.as_ref(), 99), (7, 2));
        let worn =
            TransactionalProducer { producer_id: 7, epoch: LAST_EPOCH, transaction_timeout_ms: 0, updated_ms: 0 };
        assert_eq!(next_producer(Some(&worn), 99), (99, 0), "no epoch beyond 16 bits: a new producer id");
        assert_eq!(next_producer(None, 99), (99, 0));

        let snap = m.snapshot().unwrap();
        let mut back = TransactionsMachine::new();
        back.restore(&snap).unwrap();
        assert_eq!(back.state(), m.state());
    }

    #[test]
    fn ids_and_timeouts_are_checked() {
        assert_eq!(validate("t", 0).unwrap(), 60_000);
        assert_eq!(validate("t", 5_000).unwrap(), 5_000);
        assert!(validate("", 0).is_err());
        assert!(matches!(validate("t", 16 * 60_000), Err(CoordinatorError::InvalidTransactionTimeout { .. })));
    }
}
