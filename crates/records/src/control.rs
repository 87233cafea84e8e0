//! Control batches: the commit and abort markers a transaction coordinator writes into every
//! partition a transaction touched. A control batch is transactional, holds one record and
//! takes an offset like any other; consumers skip it.
//!
//! The record's key is `version i16 (0) ‖ type i16` (0 abort, 1 commit; Kafka defines more
//! types for its own metadata log); its value is `version i16 (0) ‖ coordinator epoch i32`.
//!
//! A marker Rill writes also names the transaction it ends, in a record header
//! [`TRANSACTION_HEADER`] (`u64`, big-endian): the version of the coordinator's write that began
//! the transaction, monotonic per transactional id and so per producer id. A partition applies
//! only the first marker of each transaction, so a repeated or very late copy of one
//! transaction's marker never decides the producer's next one — whatever the epochs, under
//! either protocol version. Key and value stay Kafka's, and Kafka's clients read a control
//! record's key and skip its headers, so the batch is still Kafka's control batch. Markers
//! without the header (written before it existed) name no transaction.

use bytes::{BufMut, Bytes};

use crate::batch::BatchBuilder;
use crate::compression::Compression;
use crate::error::BatchError;
use crate::record::{Header, Record};

/// The header of a control record that names the transaction its marker ends.
pub const TRANSACTION_HEADER: &str = "rill.transaction";

/// The kind of a control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    /// The transaction was aborted: its records are not delivered to `read_committed` readers.
    Abort,
    /// The transaction was committed.
    Commit,
    /// A control type Kafka uses for its own logs; not written by Rill.
    Other(i16),
}

impl ControlKind {
    fn code(self) -> i16 {
        match self {
            Self::Abort => 0,
            Self::Commit => 1,
            Self::Other(c) => c,
        }
    }
}

/// A transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMarker {
    /// Commit or abort.
    pub kind: ControlKind,
    /// The epoch of the coordinator that wrote it (partitions refuse markers of older ones).
    pub coordinator_epoch: i32,
    /// The transaction it ends: the version of the coordinator's write that began it (0: not
    /// named).
    pub transaction: u64,
}

impl ControlMarker {
    /// The control batch carrying this marker for producer `producer_id` at `epoch`.
    pub fn batch(&self, producer_id: i64, epoch: i16, timestamp_ms: i64) -> Result<Bytes, BatchError> {
        let mut key = Vec::with_capacity(4);
        key.put_i16(0);
        key.put_i16(self.kind.code());
        let mut value = Vec::with_capacity(6);
        value.put_i16(0);
        value.put_i32(self.coordinator_epoch);
        let headers = match self.transaction {
            0 => Vec::new(),
            t => vec![Header {
                key: Bytes::from_static(TRANSACTION_HEADER.as_bytes()),
                value: Some(Bytes::copy_from_slice(&t.to_be_bytes())),
            }],
        };
        let mut b = BatchBuilder::new(Compression::None).producer(producer_id, epoch, -1).transactional(true).control();
        b.push(Record {
            timestamp_ms,
            key: Some(key.into()),
            value: Some(value.into()),
            headers,
            ..Record::default()
        })?;
        b.build()
    }

    /// Reads the marker a control record carries.
    pub fn parse(record: &Record) -> Result<Self, BatchError> {
        let bad = |reason: &str| BatchError::Record { index: 0, reason: format!("control record: {reason}") };
        let key = record.key.as_deref().ok_or_else(|| bad("no key"))?;
        if key.len() < 4 {
            return Err(bad("key shorter than 4 bytes"));
        }
        let kind = match i16::from_be_bytes([key[2], key[3]]) {
            0 => ControlKind::Abort,
            1 => ControlKind::Commit,
            other => ControlKind::Other(other),
        };
        let coordinator_epoch = match record.value.as_deref() {
            Some(v) if v.len() >= 6 => i32::from_be_bytes([v[2], v[3], v[4], v[5]]),
            _ if matches!(kind, ControlKind::Other(_)) => -1,
            _ => return Err(bad("value shorter than 6 bytes")),
        };
        let named = record.headers.iter().find(|h| h.key.as_ref() == TRANSACTION_HEADER.as_bytes());
        let transaction = match named.map(|h| h.value.as_deref()) {
            None => 0,
            Some(Some(v)) => u64::from_be_bytes(v.try_into().map_err(|_| bad("transaction header is not 8 bytes"))?),
            Some(None) => return Err(bad("transaction header without a value")),
        };
        Ok(Self { kind, coordinator_epoch, transaction })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_names_its_transaction_in_a_header_and_keeps_kafkas_key_and_value() {
        let named = ControlMarker { kind: ControlKind::Abort, coordinator_epoch: 7, transaction: 300 };
        let batch = named.batch(5, 2, 1_000).unwrap();
        let decoded = crate::decode(&batch, 1 << 20).unwrap();
        assert!(decoded.info.is_control() && decoded.info.is_transactional());
        let record = &decoded.records[0];
        assert_eq!(ControlMarker::parse(record).unwrap(), named);
        assert_eq!(record.key.as_deref(), Some(&[0, 0, 0, 0][..]), "Kafka's key: version 0, abort");
        assert_eq!(record.value.as_deref(), Some(&[0, 0, 0, 0, 0, 7][..]), "Kafka's value: version 0, epoch 7");
        assert_eq!(record.headers.len(), 1);
        assert_eq!(record.headers[0].value.as_deref(), Some(&300u64.to_be_bytes()[..]));

        let unnamed = ControlMarker { transaction: 0, ..named };
        let decoded = crate::decode(&unnamed.batch(5, 2, 1_000).unwrap(), 1 << 20).unwrap();
        assert!(decoded.records[0].headers.is_empty(), "a marker naming no transaction is Kafka's exactly");
        assert_eq!(ControlMarker::parse(&decoded.records[0]).unwrap(), unnamed);

        let mut bad = record.clone();
        bad.headers[0].value = Some(Bytes::from_static(b"short"));
        assert!(ControlMarker::parse(&bad).is_err());
        bad.headers[0].value = None;
        assert!(ControlMarker::parse(&bad).is_err());
    }
}
