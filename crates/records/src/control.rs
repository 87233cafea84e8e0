//! Control batches: the commit and abort markers a transaction coordinator writes into every
//! partition a transaction touched. A control batch is transactional, holds one record and
//! takes an offset like any other; consumers skip it.
//!
//! The record's key is `version i16 (0) ‖ type i16` (0 abort, 1 commit; Kafka defines more
//! types for its own metadata log); its value is `version i16 (0) ‖ coordinator epoch i32`.

use bytes::{BufMut, Bytes};

use crate::batch::BatchBuilder;
use crate::compression::Compression;
use crate::error::BatchError;
use crate::record::Record;

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
        let mut b = BatchBuilder::new(Compression::None).producer(producer_id, epoch, -1).transactional(true).control();
        b.push(Record { timestamp_ms, key: Some(key.into()), value: Some(value.into()), ..Record::default() })?;
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
        Ok(Self { kind, coordinator_epoch })
    }
}
