//! The `transaction-state` kind: each transactional id's record — producer id and epoch, and
//! its transaction — in the partition of `__transaction_state` the id hashes to.
//!
//! * [`metadata`]: the record ([`TransactionMetadata`]) and its states ([`TxnState`]).
//! * [`transitions`]: the coordinator's decisions (`InitProducerId`, adding partitions and
//!   groups, `EndTxn`, completion, timeouts) as pure functions of the record.
//! * [`additions`]: one write for the partitions and groups a transaction gains at once (its
//!   first batches reach many partitions together, each asking the coordinator to add it).
//! * this module: the replicated machine and the requests that propose its commands.
//!
//! `InitProducerId` with a transactional id gives the id's producer id with its epoch bumped
//! (Kafka's 16-bit epoch), so a producer restarted under the same id fences every older
//! instance: partitions refuse the older epoch's batches (`INVALID_PRODUCER_EPOCH`). When the
//! epoch would overflow, the id gets a new producer id at epoch 0 (KIP-360). Every change is
//! decided on the leader from the record it read and proposed as a compare-and-set on the
//! record's version ([`pb::WriteTransaction`]), so two decisions racing (two requests, or two
//! leaders across an election) never both apply; the loser decides again from what the winner
//! left.

pub mod additions;
pub mod metadata;
pub mod transitions;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rill_rt::Instant;

use bytes::Bytes;
use prost::Message;
use rill_broker::StatePartition;
use rill_proto::coordinator as pb;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};

use crate::error::{CoordinatorError, Result};
use crate::groups;
pub use additions::Additions;
use additions::Wanted;
pub use metadata::{TransactionMetadata, TxnProtocol, TxnState};
use transitions::InitDecision;
pub use transitions::OwedMarker;

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
/// How long an addition waits for the previous transaction's markers (its record `Prepare*`)
/// before answering `CONCURRENT_TRANSACTIONS`: they normally take a few milliseconds, and a
/// producer's next transaction begins as soon as `EndTxn` answered.
const PREPARED_WAIT: Duration = Duration::from_secs(2);

/// Idle transactional ids removed per command: a sweep of many ids is a few writes, each
/// bounded (an id is at most 255 bytes: a command stays under 70 KB).
const REMOVALS_PER_COMMAND: usize = 256;
/// What `apply` answers a command that took effect. A write's answer goes on with the record's
/// new version (8 bytes, big-endian); a single removal's stops there; a batch of removals'
/// goes on with one byte per id, 1 where it was removed (its answer starts so even when none
/// was: read it with `removed_ids`, never `took_effect` or `applied_version`).
const APPLIED: &[u8] = b"ok";
const CONFLICT: &[u8] = b"conflict";

/// True when `apply` answered that its command took effect.
pub fn took_effect(answer: &[u8]) -> bool {
    answer.starts_with(APPLIED)
}

/// Which ids of a [`pb::RemoveTransactionalIds`] of `count` were removed, by position (none
/// when the answer is not such a command's).
fn removed_ids(answer: &[u8], count: usize) -> Vec<bool> {
    match answer.strip_prefix(APPLIED) {
        Some(bits) if bits.len() == count => bits.iter().map(|b| *b == 1).collect(),
        _ => vec![false; count],
    }
}

/// The version a write that took effect left (`None`: it did not take effect, or the answer is
/// not a write's).
fn applied_version(answer: &[u8]) -> Option<u64> {
    let version: [u8; 8] = answer.strip_prefix(APPLIED)?.try_into().ok()?;
    Some(u64::from_be_bytes(version))
}

/// Every transactional id of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransactionsState {
    ids: BTreeMap<String, TransactionMetadata>,
    /// The highest version a removed record held: a new record starts above it, so a decision
    /// made from a removed record (a compare-and-set on its version) never matches the record
    /// that later takes its id.
    highest_removed_version: u64,
}

impl TransactionsState {
    /// The record of `transactional_id`.
    pub fn get(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.ids.get(transactional_id)
    }

    /// Every transactional id and its record.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &TransactionMetadata)> {
        self.ids.iter()
    }

    /// Number of transactional ids.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The version the next write of `transactional_id` gives its record: one above the
    /// current one, or above every removed record's for an id without one.
    fn next_version(&self, transactional_id: &str) -> u64 {
        self.ids.get(transactional_id).map_or(self.highest_removed_version, |t| t.version) + 1
    }

    /// Applies a record written before transactions existed (a compare-and-set on the
    /// producer id and epoch); the record's version when it took effect.
    fn apply_init(&mut self, c: pb::InitProducer) -> Option<u64> {
        let p = c.producer?;
        let current = self.ids.get(&p.transactional_id).map(|t| (t.producer_id, i32::from(t.epoch)));
        let expected = (c.expect_producer_id >= 0).then_some((c.expect_producer_id, c.expect_epoch));
        if current != expected {
            return None;
        }
        let mut stored = TransactionMetadata::from_proto(&p).ok()?;
        stored.version = self.next_version(&p.transactional_id);
        let version = stored.version;
        self.ids.insert(p.transactional_id, stored);
        Some(version)
    }

    /// Applies a [`pb::WriteTransaction`] carried by an entry of Raft term `term`: the record,
    /// if the id is still at the version the decision was made from (and, for a completion, the
    /// entry is of the term its markers carried); the record's new version when it took effect.
    fn apply_write(&mut self, c: pb::WriteTransaction, term: u64) -> Option<u64> {
        let p = c.txn?;
        let current = self.ids.get(&p.transactional_id).map_or(0, |t| t.version);
        if current != c.expect_version || (c.markers_term != 0 && c.markers_term != term) {
            return None;
        }
        let mut stored = TransactionMetadata::from_proto(&p).ok()?;
        stored.version = self.next_version(&p.transactional_id);
        let version = stored.version;
        self.ids.insert(p.transactional_id, stored);
        Some(version)
    }

    /// Applies a [`pb::RemoveTransactionalId`]: removes the record if it is still at the
    /// version the decision was made from; true when it took effect.
    fn apply_remove(&mut self, c: pb::RemoveTransactionalId) -> bool {
        let Some(current) = self.ids.get(&c.transactional_id) else { return false };
        if current.version != c.expect_version {
            return false;
        }
        self.highest_removed_version = self.highest_removed_version.max(current.version);
        self.ids.remove(&c.transactional_id);
        true
    }
}

/// The state machine of a `__transaction_state` partition.
#[derive(Debug, Default)]
pub struct TransactionsMachine {
    state: TransactionsState,
    /// Woken whenever a record changes (a write applied, a snapshot installed): what a request
    /// waiting for a record to leave a state listens to.
    changed: Arc<rill_rt::sync::Notify>,
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

    /// Notified whenever a record changes on this replica. A `Notified` taken before reading
    /// the state sees every change applied after that read.
    pub fn changes(&self) -> Arc<rill_rt::sync::Notify> {
        self.changed.clone()
    }
}

impl GroupStateMachine for TransactionsMachine {
    fn apply(&mut self, log_id: &LogId, _base: u64, payload: &Payload) -> Bytes {
        use pb::transactions_command::Command;
        let applied = match pb::TransactionsCommand::decode(payload.body.clone()).map(|c| c.command) {
            Ok(Some(Command::InitProducer(c))) => self.state.apply_init(c).map(|v| v.to_be_bytes().to_vec()),
            Ok(Some(Command::WriteTransaction(c))) => {
                self.state.apply_write(c, log_id.leader_id.term).map(|v| v.to_be_bytes().to_vec())
            }
            Ok(Some(Command::RemoveTransactionalId(c))) => self.state.apply_remove(c).then(Vec::new),
            Ok(Some(Command::RemoveTransactionalIds(c))) => {
                // One byte per id, 1 where it was removed; applied even when none was.
                let removed: Vec<u8> = c.ids.into_iter().map(|id| u8::from(self.state.apply_remove(id))).collect();
                if removed.contains(&1) {
                    self.changed.notify_waiters();
                }
                return [APPLIED, &removed].concat().into();
            }
            Ok(None) | Err(_) => {
                tracing::error!(index = log_id.index, "undecodable transactions command; skipped");
                None
            }
        };
        match applied {
            Some(version) => {
                self.changed.notify_waiters();
                [APPLIED, &version].concat().into()
            }
            None => Bytes::from_static(CONFLICT),
        }
    }

    fn snapshot(&self) -> Result<Bytes, String> {
        if rill_rt::mutation::active(rill_rt::mutation::Mutation::EmptyStateSnapshot) {
            // Deliberate bug (simulation only): the snapshot loses the state.
            return Ok(Bytes::new());
        }
        let producers = self.state.ids.iter().map(|(id, t)| t.to_proto(id)).collect();
        let highest_removed_version = self.state.highest_removed_version;
        Ok(pb::TransactionsSnapshot { producers, highest_removed_version }.encode_to_vec().into())
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        let s =
            pb::TransactionsSnapshot::decode(data).map_err(|e| format!("undecodable transactions snapshot: {e}"))?;
        let mut ids = BTreeMap::new();
        for p in s.producers {
            let mut stored = TransactionMetadata::from_proto(&p)?;
            // Records snapshotted before versions existed read as version 0, which is also what
            // an absent record compares as: a decision made from such a record could then
            // re-create it after its removal. Every replica restores the same, so it is safe
            // to number them 1.
            stored.version = stored.version.max(1);
            ids.insert(p.transactional_id, stored);
        }
        self.state = TransactionsState { ids, highest_removed_version: s.highest_removed_version };
        self.changed.notify_waiters();
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

/// The command writing `record` for `transactional_id` over the version it was decided from.
fn write_command(
    transactional_id: &str,
    record: &TransactionMetadata,
    expect_version: u64,
    markers_term: u64,
) -> Bytes {
    let command = pb::TransactionsCommand {
        command: Some(pb::transactions_command::Command::WriteTransaction(pb::WriteTransaction {
            txn: Some(record.to_proto(transactional_id)),
            expect_version,
            markers_term,
        })),
    };
    command.encode_to_vec().into()
}

/// On `partition`'s leader (the id's coordinator): gives `transactional_id` its next producer
/// id and epoch (see [`transitions::init_producer`]). `expected` is the pair a recovering
/// producer holds (KIP-360), `None` for a new instance. `new_producer_id` allocates a
/// never-used producer id; it is called only when one is needed.
///
/// An id with a transaction open gets `CONCURRENT_TRANSACTIONS` once the abort of that
/// transaction (under a bumped epoch, fencing the old instance) is written; the coordinator
/// then writes its markers and the producer's retry gets the next epoch.
pub async fn init_producer_id<F, Fut>(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    timeout_ms: u32,
    expected: Option<(i64, i16)>,
    new_producer_id: F,
    timeout: Duration,
) -> Result<(i64, i16)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<i64, String>>,
{
    let timeout_ms = validate(transactional_id, timeout_ms)?;
    let mut fresh = None;
    for _ in 0..CAS_ATTEMPTS {
        let current = partition.read(|m| m.state().get(transactional_id).cloned())?;
        let now = rill_rt::wall_clock_ms();
        let decision =
            transitions::init_producer(transactional_id, current.as_ref(), timeout_ms, expected, fresh, now)?;
        let expect_version = current.as_ref().map_or(0, |m| m.version);
        let (record, answer) = match decision {
            InitDecision::Answer { producer_id, epoch } => return Ok((producer_id, epoch)),
            InitDecision::NeedsProducerId => {
                fresh = Some(new_producer_id().await.map_err(CoordinatorError::NotAvailable)?);
                continue;
            }
            InitDecision::Write(record) => {
                let pair = (record.producer_id, record.epoch);
                (record, Ok(pair))
            }
            InitDecision::AbortFirst(record) => {
                let busy = CoordinatorError::ConcurrentTransactions {
                    transactional_id: transactional_id.to_string(),
                    state: record.state.name(),
                };
                (record, Err(busy))
            }
        };
        let answered = partition.propose(write_command(transactional_id, &record, expect_version, 0), timeout).await?;
        if applied_version(&answered).is_some() {
            return answer;
        }
        // Another decision for this id got in first: decide again from the state it left.
    }
    Err(CoordinatorError::NotAvailable(format!(
        "{transactional_id}: {CAS_ATTEMPTS} concurrent changes in a row; retry"
    )))
}

/// What `EndTxn` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The producer id and epoch the producer's next transaction runs under.
    pub producer_id: i64,
    /// See `producer_id`.
    pub epoch: i16,
    /// The `Prepare*` record written, under the producer id and epoch its markers carry
    /// ([`TransactionMetadata::prepared_part`]), whose markers are now to be written (`None`:
    /// nothing to mark — a retry, or a transaction that touched nothing).
    pub to_mark: Option<TransactionMetadata>,
}

/// Proposes `record` for `transactional_id` over version `expect_version`; the record as
/// applied (its version set) when the compare-and-set took effect.
async fn write(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    record: TransactionMetadata,
    expect_version: u64,
    timeout: Duration,
) -> Result<Option<TransactionMetadata>> {
    write_in_term(partition, transactional_id, record, expect_version, 0, timeout).await
}

/// [`write`], applying only in an entry of Raft term `markers_term` (0: any).
async fn write_in_term(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    mut record: TransactionMetadata,
    expect_version: u64,
    markers_term: u64,
    timeout: Duration,
) -> Result<Option<TransactionMetadata>> {
    let command = write_command(transactional_id, &record, expect_version, markers_term);
    let answered = partition.propose(command, timeout).await?;
    let Some(version) = applied_version(&answered) else { return Ok(None) };
    record.version = version;
    Ok(Some(record))
}

/// The record of `transactional_id` on the caught-up leader.
fn read_record(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
) -> Result<Option<TransactionMetadata>> {
    Ok(partition.read(|m| m.state().get(transactional_id).cloned())?)
}

/// On the coordinator: adds `partitions` to the transaction of `transactional_id` (see
/// [`transitions::add_to_transaction`]); `Ok` once they are recorded. Additions to the same
/// transaction arriving together share one write ([`Additions`]).
#[allow(clippy::too_many_arguments)]
pub async fn add_partitions(
    additions: &Additions,
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    producer: (i64, i16),
    partitions: &groups::assignor::TopicPartitions,
    protocol: TxnProtocol,
    timeout: Duration,
) -> Result<()> {
    validate(transactional_id, 0)?;
    let wanted = Wanted { producer, protocol, partitions: partitions.clone(), groups: Vec::new() };
    additions.add(partition, transactional_id, wanted, timeout).await
}

/// Waits until the previous transaction of `transactional_id` no longer holds up `busy` (a
/// test of the record: its markers written and its completion applied), or until `until`: a
/// request of `producers` arriving meanwhile would only be refused `CONCURRENT_TRANSACTIONS`.
/// No wait when none of `producers` is the record's (a fenced instance is refused at once).
async fn wait_while(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    producers: &[(i64, i16)],
    until: Instant,
    busy: impl Fn(&TransactionMetadata) -> bool,
) {
    let changes = partition.peek(|m| m.changes());
    loop {
        // Taken before the read: a completion applied after it wakes this.
        let changed = changes.notified();
        let waiting = read_record(partition, transactional_id).ok().flatten().is_some_and(|m| {
            busy(&m)
                && producers
                    .iter()
                    .any(|(id, epoch)| transitions::check_producer(transactional_id, &m, *id, *epoch).is_ok())
        });
        if !waiting || rill_rt::now() >= until {
            return;
        }
        let _ = rill_rt::timeout_at(until, changed).await;
    }
}

/// How long from now an addition may wait for the previous transaction's markers.
fn prepared_deadline(timeout: Duration) -> Instant {
    rill_rt::now() + PREPARED_WAIT.min(timeout)
}

/// On the coordinator: adds consumer group `group_id` to the transaction of `transactional_id`
/// (Kafka's `AddOffsetsToTxn`), beginning one when none is open; `Ok` once it is recorded. The
/// group's partition of `__consumer_offsets` gets the transaction's marker.
pub async fn add_offsets(
    additions: &Additions,
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    producer: (i64, i16),
    group_id: &str,
    protocol: TxnProtocol,
    timeout: Duration,
) -> Result<()> {
    validate(transactional_id, 0)?;
    crate::offsets::validate_group_id(group_id)?;
    let partitions = groups::assignor::TopicPartitions::new();
    let wanted = Wanted { producer, protocol, partitions, groups: vec![group_id.to_string()] };
    additions.add(partition, transactional_id, wanted, timeout).await
}

/// Records `wanted` in the transaction of `transactional_id`: one compare-and-set write (again
/// when another decision got in first). While the previous transaction's markers are being
/// written (the record is `Prepare*` under this producer's epoch), waits up to
/// [`PREPARED_WAIT`] (until `wait_until`) for it to complete instead of refusing at once: the
/// producer's next transaction starts as soon as `EndTxn` answered, and would otherwise back
/// off and retry.
async fn add_once(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    wanted: &Wanted,
    wait_until: Instant,
    timeout: Duration,
) -> Result<()> {
    let changes = partition.peek(|m| m.changes());
    let mut conflicts = 0;
    let started = rill_rt::now();
    loop {
        // Taken before the read: a completion applied after it wakes this.
        let changed = changes.notified();
        let current = read_record(partition, transactional_id)?;
        let now = rill_rt::wall_clock_ms();
        let decided = transitions::add_to_transaction(
            transactional_id,
            current.as_ref(),
            wanted.producer,
            &wanted.partitions,
            &wanted.groups,
            wanted.protocol,
            now,
        );
        let record = match decided {
            Ok(None) => return Ok(()),
            Ok(Some(record)) => record,
            Err(CoordinatorError::ConcurrentTransactions { .. })
                if current.as_ref().is_some_and(TransactionMetadata::completing) && rill_rt::now() < wait_until =>
            {
                let _ = rill_rt::timeout_at(wait_until, changed).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let expect = current.as_ref().map_or(0, |m| m.version);
        let writing = rill_rt::now();
        if write(partition, transactional_id, record, expect, timeout).await?.is_some() {
            tracing::debug!(
                transactional_id,
                waited_ms = (writing - started).as_secs_f64() * 1e3,
                write_ms = writing.elapsed().as_secs_f64() * 1e3,
                partitions = wanted.partitions.values().map(|ps| ps.len()).sum::<usize>(),
                groups = wanted.groups.len(),
                conflicts,
                "transaction additions recorded"
            );
            return Ok(());
        }
        conflicts += 1;
        if conflicts >= CAS_ATTEMPTS {
            return Err(busy(transactional_id));
        }
    }
}

/// On the coordinator, for a group coordinator about to accept a transactional offset commit:
/// checks that `group_id` is in the ongoing transaction of `transactional_id` under exactly
/// this producer id and epoch (added by `AddOffsetsToTxn`) — or, with `add` (transactions v2,
/// Kafka's TxnOffsetCommit v5), adds it first, as `AddOffsetsToTxn` would — and names that
/// transaction (the version of the write that began it), which the pending offsets then carry,
/// and the marker the group is still owed by the producer's decided transaction, if any (v2:
/// [`transitions::owed_group_marker`]), which the group's coordinator writes first.
pub async fn verify_group(
    additions: &Additions,
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    producer: (i64, i16),
    group_id: &str,
    add: bool,
    timeout: Duration,
) -> Result<Verified> {
    validate(transactional_id, 0)?;
    if add {
        add_offsets(additions, partition, transactional_id, producer, group_id, TxnProtocol::V2, timeout).await?;
    }
    let Some(m) = read_record(partition, transactional_id)? else {
        return Err(CoordinatorError::InvalidProducerIdMapping {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.0,
            current: -1,
        });
    };
    transitions::check_producer(transactional_id, &m, producer.0, producer.1)?;
    if m.state == TxnState::Ongoing && m.groups.contains(group_id) {
        let owed = transitions::owed_group_marker(&m, group_id);
        return Ok(Verified { transaction_start: m.txn_start_version, owed });
    }
    Err(CoordinatorError::InvalidTxnState {
        transactional_id: transactional_id.to_string(),
        reason: format!(
            "group {group_id:?} is not in the producer's ongoing transaction (the transaction is {}); add it with AddOffsetsToTxn first",
            m.state.name()
        ),
    })
}

/// What the coordinator answers a group's coordinator about to accept a transactional offset
/// commit, or a partition's leader about to append a transactional batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The ongoing transaction the group or partition is in (its name: the version of the
    /// write that began it); 0 when a partition's answer cannot name it (the transaction moved
    /// on meanwhile).
    pub transaction_start: u64,
    /// The marker it is still owed by the producer's previous transaction (v2).
    pub owed: Option<OwedMarker>,
}

/// On the coordinator, for a partition leader about to append the first transactional batch
/// of `producer` there: `verify_only` (v1) checks that `topic`/`partition` is in the ongoing
/// transaction of `transactional_id` under exactly this producer id and epoch; otherwise (v2)
/// it adds the partition, beginning a transaction when none is open. The answer names that
/// transaction, and with v2 may carry the marker the partition is still owed by the producer's
/// previous transaction, whose markers are being written: the partition's leader writes it
/// before the batch ([`transitions::owed_marker`]).
#[allow(clippy::too_many_arguments)]
pub async fn verify_partition(
    additions: &Additions,
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    producer: (i64, i16),
    topic: &str,
    partition_id: u32,
    verify_only: bool,
    timeout: Duration,
) -> Result<Verified> {
    let includes = |m: &TransactionMetadata| {
        m.state == TxnState::Ongoing && m.partitions.get(topic).is_some_and(|ps| ps.contains(&partition_id))
    };
    if !verify_only {
        let mut added = groups::assignor::TopicPartitions::new();
        added.entry(topic.to_string()).or_default().insert(partition_id);
        add_partitions(additions, partition, transactional_id, producer, &added, TxnProtocol::V2, timeout).await?;
        // Read after the addition applied: the decided transaction, if still finishing, is the
        // one right before the one just verified (its `EndTxn` waits for that completion). The
        // transaction is named only while it is still ongoing with the partition in it, under
        // this producer.
        let Some(m) = read_record(partition, transactional_id)? else {
            return Ok(Verified { transaction_start: 0, owed: None });
        };
        let current = transitions::check_producer(transactional_id, &m, producer.0, producer.1).is_ok();
        return Ok(Verified {
            transaction_start: if current && includes(&m) { m.txn_start_version } else { 0 },
            owed: transitions::owed_marker(&m, topic, partition_id),
        });
    }
    validate(transactional_id, 0)?;
    let current = read_record(partition, transactional_id)?;
    let Some(m) = current else {
        return Err(CoordinatorError::InvalidProducerIdMapping {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.0,
            current: -1,
        });
    };
    transitions::check_producer(transactional_id, &m, producer.0, producer.1)?;
    if includes(&m) {
        return Ok(Verified { transaction_start: m.txn_start_version, owed: None });
    }
    Err(CoordinatorError::InvalidTxnState {
        transactional_id: transactional_id.to_string(),
        reason: format!(
            "{topic}/{partition_id} is not in the producer's ongoing transaction (the transaction is {}); add it with AddPartitionsToTxn first",
            m.state.name()
        ),
    })
}

/// On the coordinator: commits or aborts the transaction of `transactional_id` (see
/// [`transitions::end_transaction`]). Returns once the decision is recorded; the caller writes
/// the markers of [`Ended::to_mark`] and then calls [`complete`]. `new_producer_id` allocates a
/// never-used producer id; it is called only when a v2 end at the last epoch needs one.
pub async fn end_transaction<F, Fut>(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    producer: (i64, i16),
    commit: bool,
    protocol: TxnProtocol,
    new_producer_id: F,
    timeout: Duration,
) -> Result<Ended>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<i64, String>>,
{
    validate(transactional_id, 0)?;
    // The previous transaction may still be finishing (v2): one decided transaction at a time.
    let until = prepared_deadline(timeout);
    let arrived = rill_rt::now();
    wait_while(partition, transactional_id, &[producer], until, |m| m.finishing.is_some()).await;
    let waited = arrived.elapsed();
    let mut fresh = None;
    for _ in 0..CAS_ATTEMPTS {
        let current = read_record(partition, transactional_id)?;
        let now = rill_rt::wall_clock_ms();
        let decided =
            transitions::end_transaction(transactional_id, current.as_ref(), producer, commit, protocol, fresh, now)?;
        let expect = current.as_ref().map_or(0, |m| m.version);
        let (record, to_mark) = match decided {
            transitions::EndDecision::AlreadyDone { producer_id, epoch } => {
                return Ok(Ended { producer_id, epoch, to_mark: None })
            }
            transitions::EndDecision::NeedsProducerId => {
                fresh = Some(new_producer_id().await.map_err(CoordinatorError::NotAvailable)?);
                continue;
            }
            transitions::EndDecision::Complete(record) => (record, false),
            transitions::EndDecision::Prepare(record) => (record, true),
        };
        let writing = rill_rt::now();
        if let Some(applied) = write(partition, transactional_id, record, expect, timeout).await? {
            tracing::debug!(
                transactional_id,
                waited_ms = waited.as_secs_f64() * 1e3,
                write_ms = writing.elapsed().as_secs_f64() * 1e3,
                commit,
                "transaction decided"
            );
            let (producer_id, epoch) = (applied.producer_id, applied.epoch);
            let to_mark = if to_mark { applied.prepared_part() } else { None };
            return Ok(Ended { producer_id, epoch, to_mark });
        }
    }
    Err(busy(transactional_id))
}

/// On the coordinator: every marker of the `Prepare*` record `prepared` is written; records its
/// completion (in an entry of `markers_term`). `Ok(false)` when it was completed already
/// (another leader), or the write was refused (the term moved on: the next round finishes it).
pub async fn complete(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    prepared: &TransactionMetadata,
    markers_term: u64,
    timeout: Duration,
) -> Result<bool> {
    for conflicts in 0..CAS_ATTEMPTS {
        // The record may have moved since `prepared` (the next transaction began and gained
        // partitions, v2): decided again from what it is now.
        let Some(current) = read_record(partition, transactional_id)? else { return Ok(false) };
        let now = rill_rt::wall_clock_ms();
        let Some(record) = transitions::complete(&current, prepared.txn_start_version, now) else { return Ok(false) };
        if write_in_term(partition, transactional_id, record, current.version, markers_term, timeout).await?.is_some() {
            tracing::debug!(transactional_id, conflicts, "transaction completion recorded");
            return Ok(true);
        }
        if read_record(partition, transactional_id)?.map(|m| m.version) == Some(current.version) {
            // Refused with the record unchanged: not this term's entry.
            return Ok(false);
        }
    }
    Ok(false)
}

/// On the coordinator: aborts every transaction open longer than its timeout (under a bumped
/// epoch, fencing its producer), and returns every `Prepare*` record — those just written and
/// those a previous leader left — whose markers are to be written.
pub async fn to_finish(
    partition: &StatePartition<TransactionsMachine>,
    timeout: Duration,
) -> Result<Vec<(String, TransactionMetadata)>> {
    let now = rill_rt::wall_clock_ms();
    let (prepared, expired): (Vec<_>, Vec<_>) = partition.read(|m| {
        let prepared: Vec<_> =
            m.state().iter().filter_map(|(id, r)| r.prepared_part().map(|p| (id.clone(), p))).collect();
        let expired: Vec<_> = m
            .state()
            .iter()
            .filter_map(|(id, r)| transitions::expire(r, now).map(|next| (id.clone(), r.version, next)))
            .collect();
        (prepared, expired)
    })?;
    let mut out = prepared;
    for (id, version, record) in expired {
        if let Some(applied) = write(partition, &id, record, version, timeout).await? {
            tracing::info!(transactional_id = %id, epoch = applied.epoch, "aborting a transaction past its timeout");
            out.push((id, applied));
        }
    }
    Ok(out)
}

/// On the coordinator: removes every transactional id idle for `expiration` (see
/// [`transitions::idle_past`]), up to `REMOVALS_PER_COMMAND` per replicated command; returns
/// the ids removed. Each removal is a compare-and-set on the version it was decided from, so an
/// id used meanwhile stays. A failed proposal ends the sweep (the next one goes on): an error
/// only when nothing was removed.
pub async fn remove_idle(
    partition: &StatePartition<TransactionsMachine>,
    expiration: Duration,
    timeout: Duration,
) -> Result<Vec<String>> {
    let now = rill_rt::wall_clock_ms();
    let expiration_ms = i64::try_from(expiration.as_millis()).unwrap_or(i64::MAX);
    let idle: Vec<(String, u64)> = partition.read(|m| {
        m.state()
            .iter()
            .filter(|(_, r)| transitions::idle_past(r, now, expiration_ms))
            .map(|(id, r)| (id.clone(), r.version))
            .collect()
    })?;
    let mut removed = Vec::new();
    for chunk in idle.chunks(REMOVALS_PER_COMMAND) {
        let ids = chunk
            .iter()
            .map(|(id, expect_version)| pb::RemoveTransactionalId {
                transactional_id: id.clone(),
                expect_version: *expect_version,
            })
            .collect();
        let command = pb::TransactionsCommand {
            command: Some(pb::transactions_command::Command::RemoveTransactionalIds(pb::RemoveTransactionalIds {
                ids,
            })),
        };
        match partition.propose(command.encode_to_vec().into(), timeout).await {
            Ok(answer) => {
                let took = removed_ids(&answer, chunk.len());
                removed.extend(chunk.iter().zip(took).filter(|(_, took)| *took).map(|((id, _), _)| id.clone()));
            }
            Err(e) if removed.is_empty() => return Err(e.into()),
            Err(e) => {
                tracing::debug!(error = %e, "removing expired transactional ids stopped; the next check goes on");
                break;
            }
        }
    }
    Ok(removed)
}

/// On the coordinator: an operator's abort of `transactional_id`'s open transaction (see
/// [`transitions::force_abort`]); returns the `PrepareAbort` record whose markers are to be
/// written.
pub async fn abort_open(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    timeout: Duration,
) -> Result<TransactionMetadata> {
    validate(transactional_id, 0)?;
    for _ in 0..CAS_ATTEMPTS {
        let Some(current) = read_record(partition, transactional_id)? else {
            return Err(CoordinatorError::TransactionalIdNotFound(transactional_id.to_string()));
        };
        let record = transitions::force_abort(transactional_id, &current, rill_rt::wall_clock_ms())?;
        if let Some(applied) = write(partition, transactional_id, record, current.version, timeout).await? {
            tracing::info!(transactional_id, epoch = applied.epoch, "aborting a transaction on request");
            return Ok(applied);
        }
    }
    Err(busy(transactional_id))
}

/// On the coordinator: runs `read` with every transactional id's record, once the coordinator
/// has confirmed with a quorum that it still leads (a linearizable read, at most `timeout`).
/// What an operator is shown (`describe`, `list`), and decides on — which transaction hangs,
/// which producer is live — must not come from a deposed coordinator that has not heard of its
/// successor: it would show a transaction open that its successor completed, or the epoch its
/// successor moved past. No confirmation within `timeout` is `NotAvailable`
/// ([`CoordinatorError::from_linearizable_read`]).
pub async fn read<R>(
    partition: &StatePartition<TransactionsMachine>,
    timeout: Duration,
    read: impl FnOnce(&TransactionsState) -> R,
) -> Result<R> {
    if rill_rt::mutation::active(rill_rt::mutation::Mutation::StaleTransactionsRead) {
        return Ok(partition.read(|m| read(m.state()))?);
    }
    partition.read_linearizable(timeout, |m| read(m.state())).await.map_err(CoordinatorError::from_linearizable_read)
}

fn busy(transactional_id: &str) -> CoordinatorError {
    CoordinatorError::NotAvailable(format!("{transactional_id}: {CAS_ATTEMPTS} concurrent changes in a row; retry"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(command: pb::transactions_command::Command) -> Payload {
        let body = pb::TransactionsCommand { command: Some(command) };
        Payload { units: 0, body: body.encode_to_vec().into(), proposal: 0 }
    }

    fn legacy_init(id: &str, pid: i64, epoch: i16, expect: Option<(i64, i16)>) -> Payload {
        payload(pb::transactions_command::Command::InitProducer(pb::InitProducer {
            producer: Some(pb::TransactionalProducer {
                transactional_id: id.into(),
                producer_id: pid,
                epoch: i32::from(epoch),
                transaction_timeout_ms: 60_000,
                updated_ms: 1,
                ..Default::default()
            }),
            expect_producer_id: expect.map_or(-1, |e| e.0),
            expect_epoch: expect.map_or(-1, |e| i32::from(e.1)),
        }))
    }

    fn write(id: &str, record: &TransactionMetadata, expect_version: u64) -> Payload {
        payload(pb::transactions_command::Command::WriteTransaction(pb::WriteTransaction {
            txn: Some(record.to_proto(id)),
            expect_version,
            markers_term: 0,
        }))
    }

    #[test]
    fn a_completion_applies_only_in_the_term_its_markers_carried() {
        let mut m = TransactionsMachine::new();
        let v = |answer: Bytes| applied_version(&answer);
        let in_term = |term: u64| {
            let mut id = LogId::default();
            id.leader_id.term = term;
            id
        };
        let record = TransactionMetadata::new(7, 60_000, 1);
        assert_eq!(v(m.apply(&in_term(3), 0, &write("t", &record, 0))), Some(1));
        let completion = |markers_term: u64| {
            payload(pb::transactions_command::Command::WriteTransaction(pb::WriteTransaction {
                txn: Some(record.to_proto("t")),
                expect_version: 1,
                markers_term,
            }))
        };
        // Markers of term 4, the completion proposed again after the node led again in term 6:
        // a deposed leader of term 5 may still send stale markers that outbid term 4's.
        assert_eq!(v(m.apply(&in_term(6), 0, &completion(4))), None, "a later term than the markers'");
        assert_eq!(v(m.apply(&in_term(6), 0, &completion(6))), Some(2));
    }

    #[test]
    fn records_from_before_transactions_still_apply_and_writes_are_a_compare_and_set() {
        let id = LogId::default();
        let mut m = TransactionsMachine::new();
        let ok = |version: u64| Some(version);
        let v = |answer: Bytes| applied_version(&answer);
        assert_eq!(v(m.apply(&id, 0, &legacy_init("t", 7, 0, None))), ok(1));
        assert_eq!(v(m.apply(&id, 0, &legacy_init("t", 7, 1, None))), None, "expected none, has one");
        assert_eq!(v(m.apply(&id, 0, &legacy_init("t", 7, 1, Some((7, 0))))), ok(2));
        let current = m.state().get("t").cloned().unwrap();
        assert_eq!((current.producer_id, current.epoch, current.state, current.version), (7, 1, TxnState::Empty, 2));

        let mut next = current.clone();
        next.epoch = 2;
        assert_eq!(v(m.apply(&id, 0, &write("t", &next, 1))), None, "decided from a version since replaced");
        assert_eq!(v(m.apply(&id, 0, &write("t", &next, 2))), ok(3));
        assert_eq!(v(m.apply(&id, 0, &write("t", &next, 2))), None, "the same decision twice applies once");
        assert_eq!(m.state().get("t").map(|t| (t.epoch, t.version)), Some((2, 3)));
        assert_eq!(v(m.apply(&id, 0, &write("new", &next, 0))), ok(1), "version 0: an id with no record");

        let snap = m.snapshot().unwrap();
        let mut back = TransactionsMachine::new();
        back.restore(&snap).unwrap();
        assert_eq!(back.state(), m.state());
    }

    fn remove(id: &str, expect_version: u64) -> Payload {
        payload(pb::transactions_command::Command::RemoveTransactionalId(pb::RemoveTransactionalId {
            transactional_id: id.into(),
            expect_version,
        }))
    }

    #[test]
    fn a_removal_is_a_compare_and_set_and_a_new_record_never_reuses_a_removed_version() {
        let id = LogId::default();
        let mut m = TransactionsMachine::new();
        let v = |answer: Bytes| applied_version(&answer);
        let record = TransactionMetadata::new(7, 60_000, 0);
        assert_eq!(v(m.apply(&id, 0, &write("t", &record, 0))), Some(1));
        assert_eq!(v(m.apply(&id, 0, &write("t", &record, 1))), Some(2));
        let removed = |m: &mut TransactionsMachine, payload: &Payload| took_effect(&m.apply(&id, 0, payload));
        assert!(!removed(&mut m, &remove("t", 1)), "decided from a version since replaced");
        assert!(!removed(&mut m, &remove("gone", 0)), "no record to remove");
        assert!(removed(&mut m, &remove("t", 2)));
        assert!(m.state().get("t").is_none());
        assert!(!removed(&mut m, &remove("t", 2)), "removed once");

        // The snapshot keeps the floor: a replica restored from it numbers the id's next record
        // as this one does.
        let mut back = TransactionsMachine::new();
        back.restore(&m.snapshot().unwrap()).unwrap();
        assert_eq!(back.state(), m.state());

        let fresh = TransactionMetadata::new(8, 60_000, 0);
        assert_eq!(v(m.apply(&id, 0, &write("t", &fresh, 0))), Some(3), "above every removed version");
        assert_eq!(v(back.apply(&id, 0, &write("t", &fresh, 0))), Some(3));
        assert_eq!(v(m.apply(&id, 0, &write("t", &record, 2))), None, "a decision from the removed record");
        assert_eq!(v(m.apply(&id, 0, &write("other", &fresh, 0))), Some(3), "the floor is the partition's");
        assert_eq!(m.state().get("t").map(|t| t.producer_id), Some(8));
    }

    #[test]
    fn a_batch_of_removals_applies_each_compare_and_set_and_answers_which_took_effect() {
        let id = LogId::default();
        let mut m = TransactionsMachine::new();
        let record = TransactionMetadata::new(7, 60_000, 0);
        for t in ["a", "b", "c"] {
            m.apply(&id, 0, &write(t, &record, 0));
        }
        m.apply(&id, 0, &write("b", &record, 1));
        let entry = |t: &str, expect_version| pb::RemoveTransactionalId { transactional_id: t.into(), expect_version };
        // "b" was written again after the decision, "gone" has no record: both stay as they are.
        let batch = payload(pb::transactions_command::Command::RemoveTransactionalIds(pb::RemoveTransactionalIds {
            ids: vec![entry("a", 1), entry("b", 1), entry("gone", 0), entry("c", 1)],
        }));
        let changes = m.changes();
        let woken = changes.notified();
        let answer = m.apply(&id, 0, &batch);
        assert_eq!(removed_ids(&answer, 4), vec![true, false, false, true]);
        assert!(m.state().get("a").is_none() && m.state().get("c").is_none());
        assert_eq!(m.state().get("b").map(|t| t.version), Some(2));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::future::Future::poll(std::pin::pin!(woken), &mut cx).is_ready(), "a removal wakes waiters");
        // The floor is the highest removed version: a new record starts above it.
        assert_eq!(applied_version(&m.apply(&id, 0, &write("a", &record, 0))), Some(2));
        assert_eq!(removed_ids(&m.apply(&id, 0, &batch), 4), vec![false; 4], "nothing left to remove");
        assert_eq!(removed_ids(b"conflict", 2), vec![false; 2]);
    }

    #[test]
    fn a_record_snapshotted_before_versions_existed_is_restored_at_version_1() {
        let old = pb::TransactionsSnapshot {
            producers: vec![pb::TransactionalProducer {
                transactional_id: "t".into(),
                producer_id: 7,
                transaction_timeout_ms: 60_000,
                ..Default::default()
            }],
            highest_removed_version: 0,
        };
        let mut m = TransactionsMachine::new();
        m.restore(&old.encode_to_vec()).unwrap();
        assert_eq!(m.state().get("t").map(|t| t.version), Some(1));
        let id = LogId::default();
        assert!(took_effect(&m.apply(&id, 0, &remove("t", 1))));
        let stale = TransactionMetadata::new(7, 60_000, 0);
        assert!(!took_effect(&m.apply(&id, 0, &write("t", &stale, 1))), "a decision from the removed record");
    }

    #[test]
    fn ids_and_timeouts_are_checked() {
        assert_eq!(validate("t", 0).unwrap(), 60_000);
        assert_eq!(validate("t", 5_000).unwrap(), 5_000);
        assert!(validate("", 0).is_err());
        assert!(matches!(validate("t", 16 * 60_000), Err(CoordinatorError::InvalidTransactionTimeout { .. })));
    }
}
