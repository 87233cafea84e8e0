//! The transaction coordinator's decisions, as pure functions of a transactional id's record,
//! the request and the coordinator's clock. Each returns the record to write (a
//! compare-and-set on its version, proposed by the caller) and what to answer; none reads a
//! clock or does I/O, so every rule here is unit-tested as Kafka's clients exercise it.
//!
//! The rules follow Kafka's `TransactionCoordinator` and `TransactionMetadata`:
//! * **Fencing.** A request must name the id's current producer id (else
//!   `INVALID_PRODUCER_ID_MAPPING`) and epoch (else `PRODUCER_FENCED`), except the retries
//!   recognised through the previous pair (KIP-360, and v2's `EndTxn`).
//! * **One thing at a time.** While markers are being written (`Prepare*`), `AddPartitions`,
//!   `EndTxn` and `InitProducerId` are answered `CONCURRENT_TRANSACTIONS`: the client retries.
//!   One exception, transactions v2: the producer's next transaction may begin, and gain
//!   partitions, while the decided one's markers are still being written (it moves to the
//!   record's `finishing`); its `EndTxn`, `InitProducerId` and a timeout wait for that
//!   completion. Each partition and group it shares with the decided transaction gets that
//!   transaction's marker first, from the partition's leader or the group's coordinator (see
//!   [`owed_marker`], [`owed_group_marker`]).
//! * **Epoch bumps.** `InitProducerId` bumps the epoch (a new producer id once it would
//!   overflow); an `InitProducerId` that finds a transaction open first aborts it under a bumped
//!   epoch, so the old instance is fenced before its transaction's markers are written; a
//!   timeout does the same. Transactions v2 also bump it at every `EndTxn`: the markers carry
//!   the new epoch, so partitions refuse anything sent under the old one (KAFKA-17754).

use crate::error::{CoordinatorError, Result};
use crate::groups::assignor::TopicPartitions;
use crate::transactions::metadata::{Finishing, TransactionMetadata, TxnProtocol, TxnState};
use crate::transactions::LAST_EPOCH;

/// What `InitProducerId` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// Write this record and answer its producer id and epoch.
    Write(TransactionMetadata),
    /// A retry of an init whose answer was lost: answer the current pair, write nothing.
    Answer { producer_id: i64, epoch: i16 },
    /// A transaction is open: write this record (aborting it under a bumped epoch, which fences
    /// the old instance), send its markers, and answer `CONCURRENT_TRANSACTIONS` (the client
    /// retries and gets the next epoch once the abort completes).
    AbortFirst(TransactionMetadata),
    /// The next pair needs a producer id never used: allocate one and decide again with it.
    NeedsProducerId,
}

/// What `EndTxn` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndDecision {
    /// Write this `Prepare*` record, then send its markers; answer once it is written (the
    /// producer id and epoch of the record: v2's next transaction runs under them).
    Prepare(TransactionMetadata),
    /// The transaction touched nothing: write this `Complete*` record at once, no markers.
    Complete(TransactionMetadata),
    /// A retry of an `EndTxn` that already took effect: answer success with this pair.
    AlreadyDone { producer_id: i64, epoch: i16 },
    /// A v2 end at the last epoch moves the id to a producer id never used: allocate one and
    /// decide again with it.
    NeedsProducerId,
}

/// The epoch after `epoch` for fencing, when there is one (none at [`LAST_EPOCH`]: the pair is
/// worn out and the next `InitProducerId` moves to a new producer id).
fn bumped(epoch: i16) -> Option<i16> {
    (epoch < LAST_EPOCH).then_some(epoch + 1)
}

/// `m` with its epoch bumped for fencing (kept when it cannot grow), the previous pair kept.
fn fence(m: &TransactionMetadata) -> TransactionMetadata {
    let mut next = m.clone();
    if let Some(e) = bumped(m.epoch) {
        next.last_producer_id = m.producer_id;
        next.last_epoch = m.epoch;
        next.epoch = e;
    }
    next
}

/// `m` moved on by a v2 `EndTxn` (KIP-890 part 2: every commit and abort fences the pair it
/// ended): its next epoch, or at [`LAST_EPOCH`] the never-used producer id `fresh_id` at epoch
/// 0, as Kafka's coordinator does — `None` when that is needed and not given. The previous pair
/// is kept either way, so a retry that names it is recognised. After a move to a new producer
/// id the decided transaction's markers still carry the pair its batches were written under
/// (`marker_producer`); the old id is fenced by being replaced, since every first batch of a
/// v2 transaction is added through this coordinator, which knows only the new one.
fn next_pair(m: &TransactionMetadata, fresh_id: Option<i64>) -> Option<TransactionMetadata> {
    let mut next = m.clone();
    next.last_producer_id = m.producer_id;
    next.last_epoch = m.epoch;
    match bumped(m.epoch) {
        Some(e) => next.epoch = e,
        None => {
            next.producer_id = fresh_id?;
            next.epoch = 0;
            next.marker_producer = Some((m.producer_id, m.epoch));
        }
    }
    Some(next)
}

fn concurrent(id: &str, m: &TransactionMetadata) -> CoordinatorError {
    CoordinatorError::ConcurrentTransactions { transactional_id: id.to_string(), state: m.state.name() }
}

/// Checks that a request's producer id and epoch are the id's current ones.
pub fn check_producer(id: &str, m: &TransactionMetadata, producer_id: i64, epoch: i16) -> Result<()> {
    if producer_id != m.producer_id {
        return Err(CoordinatorError::InvalidProducerIdMapping {
            transactional_id: id.to_string(),
            producer_id,
            current: m.producer_id,
        });
    }
    if epoch != m.epoch {
        return Err(CoordinatorError::ProducerFenced { transactional_id: id.to_string(), epoch, current: m.epoch });
    }
    Ok(())
}

/// `InitProducerId(transactional_id, timeout)`, optionally with the producer id and epoch the
/// client holds (`expected`, KIP-360: a producer recovering from an abortable error keeps its
/// id instead of being fenced). `fresh_id` is a never-used producer id when the caller has one.
pub fn init_producer(
    id: &str,
    current: Option<&TransactionMetadata>,
    timeout_ms: u32,
    expected: Option<(i64, i16)>,
    fresh_id: Option<i64>,
    now_ms: i64,
) -> Result<InitDecision> {
    // An id without a record starts afresh, whatever pair the client holds (as Kafka's
    // coordinator does): a producer recovering after its id expired gets a new producer id,
    // and its old one stays retired.
    let Some(m) = current else {
        return Ok(match fresh_id {
            Some(pid) => InitDecision::Write(TransactionMetadata::new(pid, timeout_ms, now_ms)),
            None => InitDecision::NeedsProducerId,
        });
    };
    if let Some((pid, epoch)) = expected.filter(|(pid, _)| *pid >= 0) {
        let is_current = (pid, epoch) == (m.producer_id, m.epoch);
        let is_previous = (pid, epoch) == (m.last_producer_id, m.last_epoch);
        if !is_current && !is_previous {
            return Err(CoordinatorError::ProducerFenced { transactional_id: id.to_string(), epoch, current: m.epoch });
        }
        // The client holds the pair this init already moved on from: its answer was lost.
        if is_previous && !m.state.is_prepared() && m.state != TxnState::Ongoing {
            return Ok(InitDecision::Answer { producer_id: m.producer_id, epoch: m.epoch });
        }
    }
    if m.finishing.is_some() {
        return Err(concurrent(id, m));
    }
    match m.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(concurrent(id, m)),
        TxnState::Ongoing => {
            let mut next = fence(m);
            next.state = TxnState::PrepareAbort;
            next.updated_ms = now_ms;
            Ok(InitDecision::AbortFirst(next))
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let mut next = m.clone();
            match bumped(m.epoch) {
                Some(e) => {
                    next.last_producer_id = m.producer_id;
                    next.last_epoch = m.epoch;
                    next.epoch = e;
                }
                None => {
                    let Some(pid) = fresh_id else { return Ok(InitDecision::NeedsProducerId) };
                    next.last_producer_id = m.producer_id;
                    next.last_epoch = m.epoch;
                    next.producer_id = pid;
                    next.epoch = 0;
                }
            }
            next.timeout_ms = timeout_ms;
            next.state = TxnState::Empty;
            next.partitions.clear();
            next.groups.clear();
            next.txn_start_ms = -1;
            next.updated_ms = now_ms;
            Ok(InitDecision::Write(next))
        }
    }
}

/// Most consumer groups one transaction may commit offsets for: each is a marker to write, and
/// the record is rewritten whole at every addition.
pub const MAX_GROUPS_PER_TRANSACTION: usize = 1_000;

/// `AddPartitionsToTxn` / `AddOffsetsToTxn` (v1), or a v2 producer's first batch to a
/// partition: adds `partitions` and `groups` to the transaction, beginning one if none is
/// open. `None` when everything named is in the ongoing transaction already (nothing to write).
pub fn add_to_transaction(
    id: &str,
    current: Option<&TransactionMetadata>,
    (producer_id, epoch): (i64, i16),
    partitions: &TopicPartitions,
    groups: &[String],
    protocol: TxnProtocol,
    now_ms: i64,
) -> Result<Option<TransactionMetadata>> {
    let Some(m) = current else {
        return Err(CoordinatorError::InvalidProducerIdMapping {
            transactional_id: id.to_string(),
            producer_id,
            current: -1,
        });
    };
    check_producer(id, m, producer_id, epoch)?;
    if must_wait(m, protocol) {
        return Err(concurrent(id, m));
    }
    let mut next = m.clone();
    if m.state.is_prepared() {
        // Transactions v2: the next transaction begins while this one's markers are written.
        next.finishing = Some(Finishing {
            state: m.state,
            epoch: m.epoch,
            partitions: m.partitions.clone(),
            groups: m.groups.clone(),
            txn_start_version: m.txn_start_version,
            txn_start_ms: m.txn_start_ms,
        });
    }
    if m.state != TxnState::Ongoing {
        next.state = TxnState::Ongoing;
        next.partitions.clear();
        next.groups.clear();
        next.txn_start_ms = now_ms;
        next.protocol = protocol;
        // The version this write will have: names the transaction.
        next.txn_start_version = m.version + 1;
    }
    for (topic, ps) in partitions {
        next.partitions.entry(topic.clone()).or_default().extend(ps.iter().copied());
    }
    next.groups.extend(groups.iter().cloned());
    if next.groups.len() > MAX_GROUPS_PER_TRANSACTION {
        return Err(CoordinatorError::InvalidRequest(format!(
            "a transaction may commit offsets of at most {MAX_GROUPS_PER_TRANSACTION} groups"
        )));
    }
    if next.partitions == m.partitions && next.groups == m.groups && m.state == TxnState::Ongoing {
        return Ok(None);
    }
    next.updated_ms = now_ms;
    Ok(Some(next))
}

/// True when an addition by a producer speaking `protocol` must wait for the previous
/// transaction's completion. A v2 producer's partitions and groups may join its next
/// transaction while the decided one's markers are written: where the decided transaction's
/// marker has not arrived yet, the partition's leader or the group's coordinator writes it
/// first ([`owed_marker`], [`owed_group_marker`]). v1 keeps Kafka's order.
///
/// A decided transaction whose markers carry another producer id than the record's (the id
/// moved to a new producer id at its end) is always waited for: its partitions' leaders know
/// only the batch's producer id, and could not write a marker for the old one.
pub fn must_wait(m: &TransactionMetadata, protocol: TxnProtocol) -> bool {
    let overlaps = protocol == TxnProtocol::V2 && m.protocol == TxnProtocol::V2 && m.marker_producer.is_none();
    m.state.is_prepared() && !overlaps
}

/// The marker partition `topic`/`partition` is still owed by the producer's decided
/// transaction while its next one is open (`finishing`): its leader writes it before the next
/// transaction's first batch there (the coordinator's own copy then decides nothing, as markers
/// name their transaction). `None` when the decided transaction does not include the partition,
/// or none is finishing.
pub fn owed_marker(m: &TransactionMetadata, topic: &str, partition: u32) -> Option<OwedMarker> {
    let f = m.finishing.as_ref()?;
    f.partitions.get(topic).is_some_and(|ps| ps.contains(&partition)).then(|| OwedMarker::of(f))
}

/// The marker group `group`'s offsets partition is still owed by the producer's decided
/// transaction while its next one is open (`finishing`): the group's coordinator writes it
/// before the next transaction's offsets there, which would otherwise find the decided
/// transaction's offsets still pending and drop them as orphaned (the coordinator's own copy
/// then ends nothing, as markers name their transaction). `None` when the decided transaction
/// does not include the group, or none is finishing.
pub fn owed_group_marker(m: &TransactionMetadata, group: &str) -> Option<OwedMarker> {
    let f = m.finishing.as_ref()?;
    f.groups.contains(group).then(|| OwedMarker::of(f))
}

/// A decided transaction's marker that a partition's leader writes itself (see
/// [`owed_marker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwedMarker {
    /// Commit or abort.
    pub commit: bool,
    /// The epoch the marker carries.
    pub producer_epoch: i16,
    /// The transaction it ends.
    pub transaction: u64,
}

impl OwedMarker {
    /// The marker of the decided transaction `f`.
    fn of(f: &Finishing) -> Self {
        Self { commit: f.state == TxnState::PrepareCommit, producer_epoch: f.epoch, transaction: f.txn_start_version }
    }
}

/// `EndTxn(commit)` from a producer speaking `protocol`. `fresh_id` is a never-used producer id
/// when the caller has one (v2 needs one to end a transaction at the last epoch).
pub fn end_transaction(
    id: &str,
    current: Option<&TransactionMetadata>,
    (producer_id, epoch): (i64, i16),
    commit: bool,
    protocol: TxnProtocol,
    fresh_id: Option<i64>,
    now_ms: i64,
) -> Result<EndDecision> {
    let Some(m) = current else {
        return Err(CoordinatorError::InvalidProducerIdMapping {
            transactional_id: id.to_string(),
            producer_id,
            current: -1,
        });
    };
    let wanted = if commit { TxnState::CompleteCommit } else { TxnState::CompleteAbort };
    let preparing = if commit { TxnState::PrepareCommit } else { TxnState::PrepareAbort };
    // v2 bumped the epoch when it took this EndTxn: its retry comes with the previous epoch.
    let v2_retry = m.protocol == TxnProtocol::V2
        && (producer_id, epoch) == (m.last_producer_id, m.last_epoch)
        && (m.state == wanted || m.state == preparing);
    if v2_retry {
        return match m.state == wanted {
            true => Ok(EndDecision::AlreadyDone { producer_id: m.producer_id, epoch: m.epoch }),
            false => Err(concurrent(id, m)),
        };
    }
    // A retry of the decided transaction's EndTxn while its successor is open: still completing.
    let retry_of_finishing = m
        .finishing
        .as_ref()
        .is_some_and(|f| (producer_id, epoch) == (m.last_producer_id, m.last_epoch) && f.state == preparing);
    if retry_of_finishing {
        return Err(concurrent(id, m));
    }
    check_producer(id, m, producer_id, epoch)?;
    if m.finishing.is_some() {
        // The previous transaction is not complete yet: one decided transaction at a time.
        return Err(concurrent(id, m));
    }
    let wrong_state = || CoordinatorError::InvalidTxnState {
        transactional_id: id.to_string(),
        reason: format!(
            "{} asked while the transaction is {}",
            if commit { "commit" } else { "abort" },
            m.state.name()
        ),
    };
    match m.state {
        TxnState::Ongoing => {
            // The no-epoch-bump mutation (simulation only) makes v2 keep the epoch, as v1 does.
            let bump =
                m.protocol == TxnProtocol::V2 && !rill_rt::mutation::active(rill_rt::mutation::Mutation::NoEpochBump);
            let mut next = match bump {
                true => match next_pair(m, fresh_id) {
                    Some(next) => next,
                    None => return Ok(EndDecision::NeedsProducerId),
                },
                false => m.clone(),
            };
            next.updated_ms = now_ms;
            if next.touches_nothing() {
                next.state = wanted;
                next.marker_producer = None;
                return Ok(EndDecision::Complete(next));
            }
            next.state = preparing;
            Ok(EndDecision::Prepare(next))
        }
        // v1 keeps the epoch, so its retry comes with the current pair.
        s if s == wanted && m.protocol == TxnProtocol::V1 => {
            Ok(EndDecision::AlreadyDone { producer_id: m.producer_id, epoch: m.epoch })
        }
        s if s == preparing => Err(concurrent(id, m)),
        // A v2 producer may abort with nothing begun (after an error before its first send).
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            if !commit && protocol == TxnProtocol::V2 =>
        {
            let Some(mut next) = next_pair(m, fresh_id) else { return Ok(EndDecision::NeedsProducerId) };
            next.marker_producer = None;
            next.state = TxnState::CompleteAbort;
            next.updated_ms = now_ms;
            Ok(EndDecision::Complete(next))
        }
        _ => Err(wrong_state()),
    }
}

/// Every partition and group of transaction `finished` (its name) has its marker: the record
/// that follows — `Complete*` after its `Prepare*`, or, when the producer's next transaction
/// has begun meanwhile, that one's record without `finishing`. `None` when `finished` is not
/// being finished (completed already).
pub fn complete(m: &TransactionMetadata, finished: u64, now_ms: i64) -> Option<TransactionMetadata> {
    if m.finishing.as_ref().is_some_and(|f| f.txn_start_version == finished) {
        let mut next = m.clone();
        next.finishing = None;
        next.updated_ms = now_ms;
        return Some(next);
    }
    if m.txn_start_version != finished {
        return None;
    }
    let state = match m.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let mut next = m.clone();
    next.state = state;
    next.partitions.clear();
    next.groups.clear();
    next.marker_producer = None;
    next.updated_ms = now_ms;
    Some(next)
}

/// An operator's abort of `id`'s open transaction: under a bumped epoch, as a timeout does.
pub fn force_abort(id: &str, m: &TransactionMetadata, now_ms: i64) -> Result<TransactionMetadata> {
    if m.finishing.is_some() {
        return Err(concurrent(id, m));
    }
    match m.state {
        TxnState::Ongoing => {
            let mut next = fence(m);
            next.state = TxnState::PrepareAbort;
            next.updated_ms = now_ms;
            Ok(next)
        }
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(concurrent(id, m)),
        _ => Err(CoordinatorError::InvalidTxnState {
            transactional_id: id.to_string(),
            reason: format!("no transaction is open (the id is {})", m.state.name()),
        }),
    }
}

/// A transaction open longer than its timeout is aborted under a bumped epoch, which fences
/// its producer (its next request is `PRODUCER_FENCED`; a KIP-360 client re-initialises).
pub fn expire(m: &TransactionMetadata, now_ms: i64) -> Option<TransactionMetadata> {
    let deadline = m.txn_start_ms.saturating_add(i64::from(m.timeout_ms));
    // A transaction whose predecessor is still finishing is aborted at the next check.
    if m.state != TxnState::Ongoing || now_ms <= deadline || m.finishing.is_some() {
        return None;
    }
    let mut next = fence(m);
    next.state = TxnState::PrepareAbort;
    next.updated_ms = now_ms;
    Some(next)
}

/// True when `m` may be removed at `now_ms` (Kafka's `transactional.id.expiration.ms`): no
/// transaction is open or being finished, and nothing has been written for the id for
/// `expiration_ms`. Its producer id is then retired: a later `InitProducerId` for the id gets a
/// new one, and requests under the old pair get `INVALID_PRODUCER_ID_MAPPING`.
pub fn idle_past(m: &TransactionMetadata, now_ms: i64, expiration_ms: i64) -> bool {
    let idle = matches!(m.state, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
        // The expire-open-transactions mutation (simulation only) removes open ones too.
        || rill_rt::mutation::active(rill_rt::mutation::Mutation::ExpireOpenTransactions);
    idle && now_ms.saturating_sub(m.updated_ms) >= expiration_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, ps: &[u32]) -> TopicPartitions {
        let mut t = TopicPartitions::new();
        t.insert(topic.to_string(), ps.iter().copied().collect());
        t
    }

    fn fresh() -> TransactionMetadata {
        match init_producer("t", None, 60_000, None, Some(7), 0).unwrap() {
            InitDecision::Write(m) => m,
            other => panic!("{other:?}"),
        }
    }

    fn written(d: Result<InitDecision>) -> TransactionMetadata {
        match d.unwrap() {
            InitDecision::Write(m) | InitDecision::AbortFirst(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_an_id_without_an_open_transaction_and_idle_long_enough_is_removed() {
        let mut m = fresh();
        m.updated_ms = 1_000;
        assert!(!idle_past(&m, 1_999, 1_000), "written within the expiration");
        assert!(idle_past(&m, 2_000, 1_000));
        for (state, removable) in [
            (TxnState::Empty, true),
            (TxnState::Ongoing, false),
            (TxnState::PrepareCommit, false),
            (TxnState::PrepareAbort, false),
            (TxnState::CompleteCommit, true),
            (TxnState::CompleteAbort, true),
        ] {
            m.state = state;
            assert_eq!(idle_past(&m, i64::MAX, 1_000), removable, "{state:?}");
        }
    }

    #[test]
    fn init_bumps_the_epoch_and_moves_to_a_new_id_when_it_would_overflow() {
        assert_eq!(init_producer("t", None, 1, None, None, 0).unwrap(), InitDecision::NeedsProducerId);
        let m = fresh();
        assert_eq!((m.producer_id, m.epoch, m.state), (7, 0, TxnState::Empty));
        let next = written(init_producer("t", Some(&m), 1, None, None, 1));
        assert_eq!((next.producer_id, next.epoch, next.last_epoch), (7, 1, 0));
        let worn = TransactionMetadata { epoch: LAST_EPOCH, ..m.clone() };
        assert_eq!(init_producer("t", Some(&worn), 1, None, None, 1).unwrap(), InitDecision::NeedsProducerId);
        let moved = written(init_producer("t", Some(&worn), 1, None, Some(99), 1));
        assert_eq!((moved.producer_id, moved.epoch, moved.last_producer_id, moved.last_epoch), (99, 0, 7, LAST_EPOCH));
    }

    #[test]
    fn init_with_the_current_pair_recovers_and_a_lost_answer_is_answered_again() {
        let m = fresh();
        let next = written(init_producer("t", Some(&m), 1, Some((7, 0)), None, 1));
        assert_eq!(next.epoch, 1);
        assert_eq!(
            init_producer("t", Some(&next), 1, Some((7, 0)), None, 2).unwrap(),
            InitDecision::Answer { producer_id: 7, epoch: 1 },
            "the retry of the init that moved 0 to 1"
        );
        assert!(matches!(
            init_producer("t", Some(&next), 1, Some((7, 5)), None, 2),
            Err(CoordinatorError::ProducerFenced { .. })
        ));
    }

    #[test]
    fn init_over_an_open_transaction_aborts_it_under_a_bumped_epoch_first() {
        let m = fresh();
        let open = add_to_transaction("t", Some(&m), (7, 0), &tp("a", &[0]), &[], TxnProtocol::V1, 5).unwrap().unwrap();
        let aborting = match init_producer("t", Some(&open), 1, None, None, 6).unwrap() {
            InitDecision::AbortFirst(m) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!((aborting.state, aborting.epoch), (TxnState::PrepareAbort, 1), "the markers fence epoch 0");
        assert_eq!(aborting.partitions, tp("a", &[0]), "the markers go to the partitions it touched");
        assert!(matches!(
            init_producer("t", Some(&aborting), 1, None, None, 7),
            Err(CoordinatorError::ConcurrentTransactions { .. })
        ));
        let done = complete(&aborting, aborting.txn_start_version, 8).unwrap();
        assert_eq!((done.state, done.partitions.len()), (TxnState::CompleteAbort, 0));
        let next = written(init_producer("t", Some(&done), 1, None, None, 9));
        assert_eq!((next.epoch, next.state), (2, TxnState::Empty));
    }

    #[test]
    fn a_producer_recovering_after_its_id_expired_gets_a_new_producer_id() {
        assert_eq!(init_producer("t", None, 60_000, Some((7, 3)), None, 1).unwrap(), InitDecision::NeedsProducerId);
        let record = written(init_producer("t", None, 60_000, Some((7, 3)), Some(8), 1));
        assert_eq!((record.producer_id, record.epoch, record.state), (8, 0, TxnState::Empty));
    }

    #[test]
    fn adding_checks_the_producer_and_writes_only_what_is_new() {
        let m = fresh();
        assert!(matches!(
            add_to_transaction("t", Some(&m), (8, 0), &tp("a", &[0]), &[], TxnProtocol::V1, 1),
            Err(CoordinatorError::InvalidProducerIdMapping { .. })
        ));
        assert!(matches!(
            add_to_transaction("t", Some(&m), (7, 1), &tp("a", &[0]), &[], TxnProtocol::V1, 1),
            Err(CoordinatorError::ProducerFenced { .. })
        ));
        let open =
            add_to_transaction("t", Some(&m), (7, 0), &tp("a", &[0, 1]), &[], TxnProtocol::V1, 1).unwrap().unwrap();
        assert_eq!((open.state, open.txn_start_ms), (TxnState::Ongoing, 1));
        assert_eq!(open.txn_start_version, m.version + 1, "the write that begins it names the transaction");
        assert_eq!(
            add_to_transaction("t", Some(&open), (7, 0), &tp("a", &[1]), &[], TxnProtocol::V1, 2).unwrap(),
            None
        );
        let more =
            add_to_transaction("t", Some(&open), (7, 0), &TopicPartitions::new(), &["g".into()], TxnProtocol::V1, 3)
                .unwrap()
                .unwrap();
        assert_eq!((more.txn_start_ms, more.groups.len()), (1, 1), "the transaction keeps its start");
        assert_eq!(more.txn_start_version, open.txn_start_version, "and its name");
        let groups: Vec<String> = (0..=MAX_GROUPS_PER_TRANSACTION).map(|i| format!("g{i}")).collect();
        assert!(matches!(
            add_to_transaction("t", Some(&open), (7, 0), &TopicPartitions::new(), &groups, TxnProtocol::V1, 3),
            Err(CoordinatorError::InvalidRequest(_))
        ));
    }

    #[test]
    fn v1_end_prepares_completes_and_answers_retries() {
        let m = fresh();
        assert!(matches!(
            end_transaction("t", Some(&m), (7, 0), true, TxnProtocol::V1, None, 1),
            Err(CoordinatorError::InvalidTxnState { .. })
        ));
        let open = add_to_transaction("t", Some(&m), (7, 0), &tp("a", &[0]), &[], TxnProtocol::V1, 1).unwrap().unwrap();
        let prepared = match end_transaction("t", Some(&open), (7, 0), true, TxnProtocol::V1, None, 2).unwrap() {
            EndDecision::Prepare(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!((prepared.state, prepared.epoch), (TxnState::PrepareCommit, 0), "v1 keeps the epoch");
        assert!(matches!(
            add_to_transaction("t", Some(&prepared), (7, 0), &tp("b", &[0]), &[], TxnProtocol::V1, 3),
            Err(CoordinatorError::ConcurrentTransactions { .. })
        ));
        assert!(matches!(
            end_transaction("t", Some(&prepared), (7, 0), true, TxnProtocol::V1, None, 3),
            Err(CoordinatorError::ConcurrentTransactions { .. })
        ));
        assert!(matches!(
            end_transaction("t", Some(&prepared), (7, 0), false, TxnProtocol::V1, None, 3),
            Err(CoordinatorError::InvalidTxnState { .. })
        ));
        let done = complete(&prepared, prepared.txn_start_version, 4).unwrap();
        assert_eq!(
            end_transaction("t", Some(&done), (7, 0), true, TxnProtocol::V1, None, 5).unwrap(),
            EndDecision::AlreadyDone { producer_id: 7, epoch: 0 }
        );
        assert!(matches!(
            end_transaction("t", Some(&done), (7, 0), false, TxnProtocol::V1, None, 5),
            Err(CoordinatorError::InvalidTxnState { .. })
        ));
        let again =
            add_to_transaction("t", Some(&done), (7, 0), &tp("b", &[2]), &[], TxnProtocol::V1, 6).unwrap().unwrap();
        assert_eq!((again.state, again.partitions, again.txn_start_ms), (TxnState::Ongoing, tp("b", &[2]), 6));
    }

    #[test]
    fn v2_begins_the_next_transaction_while_the_decided_ones_markers_are_written() {
        let m = fresh();
        let open =
            add_to_transaction("t", Some(&m), (7, 0), &tp("a", &[0, 1]), &[], TxnProtocol::V2, 1).unwrap().unwrap();
        let open = add_to_transaction("t", Some(&open), (7, 0), &tp("a", &[]), &["g0".into()], TxnProtocol::V2, 1)
            .unwrap()
            .unwrap();
        let EndDecision::Prepare(prepared) =
            end_transaction("t", Some(&open), (7, 0), true, TxnProtocol::V2, None, 2).unwrap()
        else {
            panic!("a commit with partitions prepares")
        };
        // As written: each write's apply sets the version.
        let prepared = TransactionMetadata { version: 2, ..prepared };
        let first = prepared.txn_start_version;
        assert!(!must_wait(&prepared, TxnProtocol::V2), "a v2 partition or group joins the next one at once");
        assert!(must_wait(&prepared, TxnProtocol::V1), "v1 waits");
        // The next transaction's first partitions, under the bumped epoch.
        let next = add_to_transaction("t", Some(&prepared), (7, 1), &tp("a", &[1, 2]), &[], TxnProtocol::V2, 3)
            .unwrap()
            .unwrap();
        assert_eq!((next.state, next.partitions.clone()), (TxnState::Ongoing, tp("a", &[1, 2])));
        assert!(next.txn_start_version > first, "a new name");
        let f = next.finishing.clone().unwrap();
        assert_eq!(
            (f.state, f.epoch, f.partitions, f.txn_start_version),
            (TxnState::PrepareCommit, 1, tp("a", &[0, 1]), first)
        );
        assert!(next.is_finishing(first) && !next.is_finishing(next.txn_start_version));
        let part = next.prepared_part().unwrap();
        assert_eq!((part.state, part.partitions, part.epoch), (TxnState::PrepareCommit, tp("a", &[0, 1]), 1));
        // Partition 1 is in both: its leader writes the decided transaction's marker first.
        assert_eq!(
            owed_marker(&next, "a", 1),
            Some(OwedMarker { commit: true, producer_epoch: 1, transaction: first })
        );
        assert_eq!(owed_marker(&next, "a", 2), None, "not in the decided transaction");
        // The decided transaction's group is owed its marker by the group's coordinator; a group
        // joins the next transaction at once.
        assert_eq!(
            owed_group_marker(&next, "g0"),
            Some(OwedMarker { commit: true, producer_epoch: 1, transaction: first })
        );
        let grouped =
            add_to_transaction("t", Some(&next), (7, 1), &tp("a", &[]), &["g".into()], TxnProtocol::V2, 4).unwrap();
        let grouped = grouped.unwrap();
        assert!(grouped.groups.contains("g") && grouped.finishing == next.finishing);
        assert_eq!(owed_group_marker(&grouped, "g"), None, "not in the decided transaction");
        // Until completion: no EndTxn, no InitProducerId, no timeout abort, no admin abort.
        assert!(matches!(
            end_transaction("t", Some(&next), (7, 1), true, TxnProtocol::V2, None, 4),
            Err(CoordinatorError::ConcurrentTransactions { .. })
        ));
        assert!(
            matches!(
                end_transaction("t", Some(&next), (7, 0), true, TxnProtocol::V2, None, 4),
                Err(CoordinatorError::ConcurrentTransactions { .. })
            ),
            "a retry of the decided transaction's EndTxn"
        );
        assert!(matches!(
            init_producer("t", Some(&next), 60_000, None, None, 4),
            Err(CoordinatorError::ConcurrentTransactions { .. })
        ));
        assert_eq!(expire(&next, i64::MAX), None);
        assert!(force_abort("t", &next, 4).is_err());
        // More partitions join meanwhile.
        let more =
            add_to_transaction("t", Some(&next), (7, 1), &tp("b", &[0]), &[], TxnProtocol::V2, 4).unwrap().unwrap();
        assert_eq!(more.finishing, next.finishing);
        // The decided transaction completes: the next one stays, without `finishing`.
        assert_eq!(complete(&more, more.txn_start_version, 5), None, "the open one is not being finished");
        let done = complete(&more, first, 5).unwrap();
        assert_eq!(
            (done.state, done.finishing.clone(), done.txn_start_version),
            (TxnState::Ongoing, None, more.txn_start_version)
        );
        assert_eq!(complete(&done, first, 6), None, "completed once");
        assert!(matches!(
            end_transaction("t", Some(&done), (7, 1), false, TxnProtocol::V2, None, 6),
            Ok(EndDecision::Prepare(_))
        ));
    }

    #[test]
    fn v2_end_bumps_the_epoch_so_the_old_one_cannot_reach_the_next_transaction() {
        let m = fresh();
        let open = add_to_transaction("t", Some(&m), (7, 0), &tp("a", &[0]), &[], TxnProtocol::V2, 1).unwrap().unwrap();
        let prepared = match end_transaction("t", Some(&open), (7, 0), false, TxnProtocol::V2, None, 2).unwrap() {
            EndDecision::Prepare(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!((prepared.state, prepared.epoch, prepared.last_epoch), (TxnState::PrepareAbort, 1, 0));
        let done = complete(&prepared, prepared.txn_start_version, 3).unwrap();
        // The EndTxn's retry under epoch 0 is answered with the new epoch.
        assert_eq!(
            end_transaction("t", Some(&done), (7, 0), false, TxnProtocol::V2, None, 4).unwrap(),
            EndDecision::AlreadyDone { producer_id: 7, epoch: 1 }
        );
        // A delayed add (or produce) of the aborted transaction under epoch 0 is fenced.
        assert!(matches!(
            add_to_transaction("t", Some(&done), (7, 0), &tp("a", &[0]), &[], TxnProtocol::V2, 5),
            Err(CoordinatorError::ProducerFenced { .. })
        ));
        let next =
            add_to_transaction("t", Some(&done), (7, 1), &tp("a", &[0]), &[], TxnProtocol::V2, 5).unwrap().unwrap();
        assert_eq!((next.state, next.epoch), (TxnState::Ongoing, 1));
        // A delayed EndTxn(commit) of the aborted transaction cannot commit the next one.
        assert!(matches!(
            end_transaction("t", Some(&next), (7, 0), true, TxnProtocol::V2, None, 6),
            Err(CoordinatorError::ProducerFenced { .. })
        ));
        // With nothing begun, a v2 abort completes at once (and still bumps the epoch).
        match end_transaction("t", Some(&done), (7, 1), false, TxnProtocol::V2, None, 7).unwrap() {
            EndDecision::Complete(c) => assert_eq!((c.state, c.epoch), (TxnState::CompleteAbort, 2)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v2_end_at_the_last_epoch_moves_to_a_new_producer_id_and_marks_under_the_old_pair() {
        let worn = TransactionMetadata { epoch: LAST_EPOCH, ..fresh() };
        let open =
            add_to_transaction("t", Some(&worn), (7, LAST_EPOCH), &tp("a", &[0]), &["g".into()], TxnProtocol::V2, 1)
                .unwrap()
                .unwrap();
        assert_eq!(
            end_transaction("t", Some(&open), (7, LAST_EPOCH), true, TxnProtocol::V2, None, 2).unwrap(),
            EndDecision::NeedsProducerId,
            "the epoch cannot grow: a new producer id is needed"
        );
        let prepared = match end_transaction("t", Some(&open), (7, LAST_EPOCH), true, TxnProtocol::V2, Some(99), 2) {
            Ok(EndDecision::Prepare(p)) => TransactionMetadata { version: open.version + 1, ..p },
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (prepared.producer_id, prepared.epoch, prepared.last_producer_id, prepared.last_epoch),
            (99, 0, 7, LAST_EPOCH),
            "answered with the new id at epoch 0; the old pair is kept for the retry"
        );
        let marked = prepared.prepared_part().unwrap();
        assert_eq!((marked.producer_id, marked.epoch), (7, LAST_EPOCH), "the markers carry the batches' pair");
        // The next transaction waits for the markers: partitions know only the batch's producer
        // id and could not write the old id's marker themselves.
        assert!(must_wait(&prepared, TxnProtocol::V2));
        assert!(matches!(
            add_to_transaction("t", Some(&prepared), (99, 0), &tp("a", &[0]), &[], TxnProtocol::V2, 3),
            Err(CoordinatorError::ConcurrentTransactions { .. })
        ));
        // The old pair is fenced by being replaced.
        assert!(matches!(
            add_to_transaction("t", Some(&prepared), (7, LAST_EPOCH), &tp("a", &[0]), &[], TxnProtocol::V2, 3),
            Err(CoordinatorError::InvalidProducerIdMapping { .. })
        ));
        let done = complete(&prepared, prepared.txn_start_version, 4).unwrap();
        assert_eq!((done.state, done.marker_producer), (TxnState::CompleteCommit, None));
        assert_eq!(
            end_transaction("t", Some(&done), (7, LAST_EPOCH), true, TxnProtocol::V2, None, 5).unwrap(),
            EndDecision::AlreadyDone { producer_id: 99, epoch: 0 },
            "a retry under the old pair learns the new one"
        );
        let next =
            add_to_transaction("t", Some(&done), (99, 0), &tp("a", &[0]), &[], TxnProtocol::V2, 6).unwrap().unwrap();
        assert_eq!((next.state, next.producer_id, next.epoch), (TxnState::Ongoing, 99, 0));

        // An abort with nothing begun at the last epoch moves too, with no markers to write.
        let idle = TransactionMetadata { epoch: LAST_EPOCH, state: TxnState::CompleteCommit, ..fresh() };
        assert_eq!(
            end_transaction("t", Some(&idle), (7, LAST_EPOCH), false, TxnProtocol::V2, None, 7).unwrap(),
            EndDecision::NeedsProducerId
        );
        match end_transaction("t", Some(&idle), (7, LAST_EPOCH), false, TxnProtocol::V2, Some(100), 7).unwrap() {
            EndDecision::Complete(c) => {
                assert_eq!(
                    (c.state, c.producer_id, c.epoch, c.marker_producer),
                    (TxnState::CompleteAbort, 100, 0, None)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_transaction_past_its_timeout_is_aborted_under_a_bumped_epoch() {
        let m = TransactionMetadata { timeout_ms: 100, ..fresh() };
        let open =
            add_to_transaction("t", Some(&m), (7, 0), &tp("a", &[0]), &[], TxnProtocol::V1, 1_000).unwrap().unwrap();
        assert_eq!(expire(&open, 1_100), None);
        let aborting = expire(&open, 1_101).unwrap();
        assert_eq!((aborting.state, aborting.epoch), (TxnState::PrepareAbort, 1));
        assert_eq!(expire(&aborting, 9_999), None, "only open transactions expire");
        assert!(matches!(
            end_transaction(
                "t",
                Some(&complete(&aborting, aborting.txn_start_version, 1_200).unwrap()),
                (7, 0),
                true,
                TxnProtocol::V1,
                None,
                1_201
            ),
            Err(CoordinatorError::ProducerFenced { .. })
        ));
    }
}
