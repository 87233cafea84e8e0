//! A transactional id's record: its producer id and epoch, and its transaction — state,
//! partitions, groups, start time and protocol version — as the `__transaction_state`
//! partition stores it (`TransactionalProducer` in `proto/rill/coordinator.proto`).

use std::collections::BTreeSet;

use rill_proto::coordinator as pb;

use crate::groups::assignor::TopicPartitions;
use crate::groups::group::{partitions_from_proto, partitions_to_proto};

/// Where a transaction is (Kafka's `TransactionState`).
///
/// ```text
///  Empty ──add──► Ongoing ──EndTxn(commit)──► PrepareCommit ──markers──► CompleteCommit ──add──► Ongoing …
///                    │ └──EndTxn(abort), timeout, fencing──► PrepareAbort ──markers──► CompleteAbort ──add──► …
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// No transaction yet under this producer epoch.
    Empty,
    /// Partitions or groups have been added; records may be written.
    Ongoing,
    /// Decided to commit; the markers are being written.
    PrepareCommit,
    /// Decided to abort; the markers are being written.
    PrepareAbort,
    /// Committed: every partition has its marker.
    CompleteCommit,
    /// Aborted: every partition has its marker.
    CompleteAbort,
}

impl TxnState {
    /// The stored form.
    pub fn to_proto(self) -> i32 {
        let s = match self {
            Self::Empty => pb::TransactionState::TxnEmpty,
            Self::Ongoing => pb::TransactionState::TxnOngoing,
            Self::PrepareCommit => pb::TransactionState::TxnPrepareCommit,
            Self::PrepareAbort => pb::TransactionState::TxnPrepareAbort,
            Self::CompleteCommit => pb::TransactionState::TxnCompleteCommit,
            Self::CompleteAbort => pb::TransactionState::TxnCompleteAbort,
        };
        s as i32
    }

    /// Reads the stored form.
    pub fn from_proto(v: i32) -> Result<Self, String> {
        Ok(match pb::TransactionState::try_from(v).map_err(|_| format!("unknown transaction state {v}"))? {
            pb::TransactionState::TxnEmpty => Self::Empty,
            pb::TransactionState::TxnOngoing => Self::Ongoing,
            pb::TransactionState::TxnPrepareCommit => Self::PrepareCommit,
            pb::TransactionState::TxnPrepareAbort => Self::PrepareAbort,
            pb::TransactionState::TxnCompleteCommit => Self::CompleteCommit,
            pb::TransactionState::TxnCompleteAbort => Self::CompleteAbort,
        })
    }

    /// Kafka's name for the state (what `rill txn list` shows).
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
        }
    }

    /// The state Kafka names `name`; `None` for a name no state of Rill's has (Kafka's `Dead`
    /// and `PrepareEpochFence` among them).
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Empty, Self::Ongoing, Self::PrepareCommit, Self::PrepareAbort, Self::CompleteCommit, Self::CompleteAbort]
            .into_iter()
            .find(|s| s.name() == name)
    }

    /// A transaction is open: begun and not yet complete (its start time means something).
    pub fn is_open(self) -> bool {
        self == Self::Ongoing || self.is_prepared()
    }

    /// Markers are being written: the transaction is decided but not complete.
    pub fn is_prepared(self) -> bool {
        matches!(self, Self::PrepareCommit | Self::PrepareAbort)
    }
}

/// The transaction protocol a producer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxnProtocol {
    /// Partitions and groups added explicitly (`AddPartitionsToTxn`, `AddOffsetsToTxn`); the
    /// epoch is bumped only to fence (a new instance, a timeout). What Kafka's clients speak.
    #[default]
    V1,
    /// Partitions added implicitly on first produce; the epoch is bumped at every commit and
    /// abort, so nothing sent under transaction N's epoch can join transaction N+1 (KIP-890).
    V2,
}

impl TxnProtocol {
    /// The stored form.
    pub fn to_proto(self) -> u32 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }

    /// The protocol of version number `v`, as stored and as requests name it (0 — stored before
    /// versions were recorded, or a request that names none — is v1). The one reader of version
    /// numbers: every listener and the stored records go through it.
    pub fn from_version(v: u32) -> Result<Self, String> {
        match v {
            0 | 1 => Ok(Self::V1),
            2 => Ok(Self::V2),
            other => Err(format!(
                "unknown transaction version {other}: 1 (partitions added with AddPartitionsToTxn) or 2 (added by the first batch)"
            )),
        }
    }
}

/// A decided v2 transaction whose markers are still being written while the producer's next
/// transaction is already open (see [`TransactionMetadata::finishing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finishing {
    /// `PrepareCommit` or `PrepareAbort`.
    pub state: TxnState,
    /// The producer epoch its markers carry.
    pub epoch: i16,
    /// Its partitions.
    pub partitions: TopicPartitions,
    /// Its groups.
    pub groups: BTreeSet<String>,
    /// Its name (the version of the write that began it).
    pub txn_start_version: u64,
    /// When it began.
    pub txn_start_ms: i64,
}

/// A transactional id's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionMetadata {
    /// Producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// The producer id before the last bump (-1: none).
    pub last_producer_id: i64,
    /// The epoch before the last bump (-1: none).
    pub last_epoch: i16,
    /// The transaction timeout its producer asked for.
    pub timeout_ms: u32,
    /// Where its transaction is.
    pub state: TxnState,
    /// The partitions in the transaction.
    pub partitions: TopicPartitions,
    /// The groups whose offsets the transaction commits.
    pub groups: BTreeSet<String>,
    /// The coordinator's clock when the transaction began.
    pub txn_start_ms: i64,
    /// The coordinator's clock at the last write.
    pub updated_ms: i64,
    /// The protocol of its current transaction.
    pub protocol: TxnProtocol,
    /// Bumped by every write (compare-and-set); 0 before the first.
    pub version: u64,
    /// The version of the write that began the open (or last) transaction: which transaction
    /// of the id it is, whatever the epochs (0: none yet).
    pub txn_start_version: u64,
    /// Transactions v2: the previous transaction, decided (`Prepare*`) and still having its
    /// markers written, once the producer's next transaction began (`state` is then that one's).
    /// A producer begins its next transaction as soon as `EndTxn` is answered; keeping the
    /// decided one here lets the next one's partitions be added at once instead of after every
    /// marker. Cleared by the decided transaction's completion.
    pub finishing: Option<Finishing>,
    /// The producer id and epoch the decided (`Prepare*`) transaction's markers carry when
    /// they are not the record's own: a v2 `EndTxn` at the last epoch moves the id to a new
    /// producer id at epoch 0 at once (its answer names the new pair), while the transaction it
    /// decides was written under the old pair. `None` otherwise.
    pub marker_producer: Option<(i64, i16)>,
}

impl TransactionMetadata {
    /// A new id's record: `producer_id` at epoch 0, no transaction.
    pub fn new(producer_id: i64, timeout_ms: u32, now_ms: i64) -> Self {
        Self {
            producer_id,
            epoch: 0,
            last_producer_id: -1,
            last_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: TopicPartitions::new(),
            groups: BTreeSet::new(),
            txn_start_ms: -1,
            updated_ms: now_ms,
            protocol: TxnProtocol::V1,
            version: 0,
            txn_start_version: 0,
            finishing: None,
            marker_producer: None,
        }
    }

    /// The transaction whose markers are to be written, as a record in its `Prepare*` state
    /// under the producer id and epoch its markers carry: this one when it is `Prepare*`, or
    /// the decided one its successor keeps in `finishing`.
    pub fn prepared_part(&self) -> Option<TransactionMetadata> {
        if self.state.is_prepared() {
            let (producer_id, epoch) = self.marker_producer.unwrap_or((self.producer_id, self.epoch));
            return Some(TransactionMetadata { producer_id, epoch, marker_producer: None, ..self.clone() });
        }
        let f = self.finishing.as_ref()?;
        Some(TransactionMetadata {
            state: f.state,
            epoch: f.epoch,
            partitions: f.partitions.clone(),
            groups: f.groups.clone(),
            txn_start_version: f.txn_start_version,
            txn_start_ms: f.txn_start_ms,
            finishing: None,
            ..self.clone()
        })
    }

    /// True while a decided transaction of this id has markers still to write (the record is
    /// `Prepare*`, or keeps one in `finishing`).
    pub fn completing(&self) -> bool {
        self.state.is_prepared() || self.finishing.is_some()
    }

    /// True while transaction `txn_start_version` is decided and its markers not all written.
    pub fn is_finishing(&self, txn_start_version: u64) -> bool {
        (self.state.is_prepared() && self.txn_start_version == txn_start_version)
            || self.finishing.as_ref().is_some_and(|f| f.txn_start_version == txn_start_version)
    }

    /// True when the transaction has neither partitions nor groups (no marker to write).
    pub fn touches_nothing(&self) -> bool {
        self.partitions.values().all(BTreeSet::is_empty) && self.groups.is_empty()
    }

    /// The stored form.
    pub fn to_proto(&self, transactional_id: &str) -> pb::TransactionalProducer {
        pb::TransactionalProducer {
            transactional_id: transactional_id.to_string(),
            producer_id: self.producer_id,
            epoch: i32::from(self.epoch),
            transaction_timeout_ms: self.timeout_ms,
            updated_ms: self.updated_ms,
            state: self.state.to_proto(),
            partitions: partitions_to_proto(&self.partitions),
            groups: self.groups.iter().cloned().collect(),
            txn_start_ms: self.txn_start_ms,
            protocol_version: self.protocol.to_proto(),
            last_producer_id: self.last_producer_id,
            last_epoch: i32::from(self.last_epoch),
            version: self.version,
            txn_start_version: self.txn_start_version,
            finishing: self.finishing.as_ref().map(|f| pb::TransactionFinishing {
                state: f.state.to_proto(),
                epoch: i32::from(f.epoch),
                partitions: partitions_to_proto(&f.partitions),
                groups: f.groups.iter().cloned().collect(),
                txn_start_version: f.txn_start_version,
                txn_start_ms: f.txn_start_ms,
            }),
            marker_producer: self
                .marker_producer
                .map(|(producer_id, epoch)| pb::MarkerProducer { producer_id, epoch: i32::from(epoch) }),
        }
    }

    /// Reads the stored form. A record written before transactions existed (fields 1-5 only)
    /// reads as an id with no transaction, no previous producer, at version 0.
    pub fn from_proto(p: &pb::TransactionalProducer) -> Result<Self, String> {
        let id = &p.transactional_id;
        let epoch = i16::try_from(p.epoch).map_err(|_| format!("{id}: epoch {} beyond 16 bits", p.epoch))?;
        let old_record = p.version == 0 && p.last_producer_id == 0 && p.last_epoch == 0;
        let (last_producer_id, last_epoch) = if old_record {
            (-1, -1)
        } else {
            let e =
                i16::try_from(p.last_epoch).map_err(|_| format!("{id}: last epoch {} beyond 16 bits", p.last_epoch))?;
            (p.last_producer_id, e)
        };
        Ok(Self {
            producer_id: p.producer_id,
            epoch,
            last_producer_id,
            last_epoch,
            timeout_ms: p.transaction_timeout_ms,
            state: TxnState::from_proto(p.state).map_err(|e| format!("{id}: {e}"))?,
            partitions: partitions_from_proto(&p.partitions),
            groups: p.groups.iter().cloned().collect(),
            txn_start_ms: if old_record { -1 } else { p.txn_start_ms },
            updated_ms: p.updated_ms,
            protocol: TxnProtocol::from_version(p.protocol_version).map_err(|e| format!("{id}: {e}"))?,
            version: p.version,
            txn_start_version: p.txn_start_version,
            finishing: match &p.finishing {
                None => None,
                Some(f) => Some(Finishing {
                    state: TxnState::from_proto(f.state)
                        .ok()
                        .filter(|s| s.is_prepared())
                        .ok_or_else(|| format!("{id}: a finishing transaction in state {}", f.state))?,
                    epoch: i16::try_from(f.epoch)
                        .map_err(|_| format!("{id}: finishing epoch {} beyond 16 bits", f.epoch))?,
                    partitions: partitions_from_proto(&f.partitions),
                    groups: f.groups.iter().cloned().collect(),
                    txn_start_version: f.txn_start_version,
                    txn_start_ms: f.txn_start_ms,
                }),
            },
            marker_producer: match &p.marker_producer {
                None => None,
                Some(m) => Some((
                    m.producer_id,
                    i16::try_from(m.epoch).map_err(|_| format!("{id}: marker epoch {} beyond 16 bits", m.epoch))?,
                )),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_and_old_records_read_as_empty() {
        let mut m = TransactionMetadata::new(7, 60_000, 5);
        m.state = TxnState::PrepareAbort;
        m.partitions.entry("t".into()).or_default().extend([0, 3]);
        m.groups.insert("g".into());
        m.protocol = TxnProtocol::V2;
        m.version = 4;
        m.last_epoch = 0;
        m.last_producer_id = 7;
        m.epoch = 1;
        assert_eq!(TransactionMetadata::from_proto(&m.to_proto("x")).unwrap(), m);
        let mut overlapped = m.clone();
        overlapped.state = TxnState::Ongoing;
        overlapped.finishing = Some(Finishing {
            state: TxnState::PrepareCommit,
            epoch: 1,
            partitions: [("t".to_string(), [2].into())].into(),
            groups: BTreeSet::new(),
            txn_start_version: 3,
            txn_start_ms: 4,
        });
        assert_eq!(TransactionMetadata::from_proto(&overlapped.to_proto("x")).unwrap(), overlapped);
        let moved = TransactionMetadata { producer_id: 8, epoch: 0, marker_producer: Some((7, 5)), ..m.clone() };
        assert_eq!(TransactionMetadata::from_proto(&moved.to_proto("x")).unwrap(), moved);
        let marked = moved.prepared_part().unwrap();
        assert_eq!(
            (marked.producer_id, marked.epoch, marked.marker_producer),
            (7, 5, None),
            "markers carry the old pair"
        );
        let part = overlapped.prepared_part().unwrap();
        assert_eq!((part.state, part.txn_start_version, part.finishing), (TxnState::PrepareCommit, 3, None));
        assert!(overlapped.is_finishing(3) && !overlapped.is_finishing(m.txn_start_version));
        let mut bad = overlapped.to_proto("x");
        if let Some(f) = bad.finishing.as_mut() {
            f.state = TxnState::Ongoing.to_proto();
        }
        assert!(TransactionMetadata::from_proto(&bad).is_err(), "only a decided transaction can be finishing");

        let old = pb::TransactionalProducer {
            transactional_id: "x".into(),
            producer_id: 3,
            epoch: 9,
            transaction_timeout_ms: 1_000,
            updated_ms: 2,
            ..Default::default()
        };
        let read = TransactionMetadata::from_proto(&old).unwrap();
        assert_eq!(
            (read.state, read.last_epoch, read.version, read.protocol),
            (TxnState::Empty, -1, 0, TxnProtocol::V1)
        );
        let wide = pb::TransactionalProducer { epoch: 40_000, ..old.clone() };
        assert!(TransactionMetadata::from_proto(&wide).is_err());
        let unknown = pb::TransactionalProducer { state: 77, version: 1, ..old };
        assert!(TransactionMetadata::from_proto(&unknown).is_err());
    }
}
