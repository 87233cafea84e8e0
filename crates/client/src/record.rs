//! The plain data types of the client API.

use bytes::Bytes;
use rill_proto::records as pb;

/// Acknowledgement level for produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// Committed by a Raft majority (synced on disk) and present on every in-sync replica.
    #[default]
    All,
    /// Synced in the leader's log; lost if the leader dies before replicating it.
    Leader,
    /// Not waited for.
    None,
}

impl Acks {
    pub(crate) fn wire(self) -> i32 {
        match self {
            Acks::All => pb::Acks::All as i32,
            Acks::Leader => pb::Acks::Leader as i32,
            Acks::None => pb::Acks::None as i32,
        }
    }
}

/// Which offset to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first stored offset.
    Earliest,
    /// The high watermark: where the next committed record will go.
    Latest,
    /// The first offset whose batch was appended at or after this time (ms since the epoch);
    /// the high watermark when there is none.
    Timestamp(i64),
}

/// A record to produce. Keys, values and header values may each be null (`None`); a keyed
/// record with a null value is a tombstone (compacted topics drop the key).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// Optional key. Keyed records go to Kafka's default partition for the key.
    pub key: Option<Bytes>,
    /// Value; `None` is null.
    pub value: Option<Bytes>,
    /// Headers, in order; a key may repeat, a value may be null.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in ms since the epoch; 0 means "now".
    pub timestamp_ms: i64,
}

impl Record {
    /// An unkeyed record.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self { value: Some(value.into()), ..Default::default() }
    }

    /// A keyed record.
    pub fn keyed(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self { key: Some(key.into()), value: Some(value.into()), ..Default::default() }
    }

    /// A tombstone: `key` with a null value.
    pub fn tombstone(key: impl Into<Bytes>) -> Self {
        Self { key: Some(key.into()), ..Default::default() }
    }

    /// Adds a header.
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((key.into(), Some(value.into())));
        self
    }

    /// Approximate encoded size, for batching decisions.
    pub fn size_bytes(&self) -> usize {
        let len = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
        16 + len(&self.key) + len(&self.value) + self.headers.iter().map(|(k, v)| 4 + k.len() + len(v)).sum::<usize>()
    }
}

/// A record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedRecord {
    /// Its offset.
    pub offset: u64,
    /// Timestamp (ms since the epoch): the producer's create time, or the broker's append time
    /// when the batch says so.
    pub timestamp_ms: i64,
    /// When the partition's leader appended its batch (ms since the epoch): what consumer lag
    /// in seconds is measured from.
    pub append_time_ms: i64,
    /// Key; `None` is null.
    pub key: Option<Bytes>,
    /// Value; `None` is null (a tombstone, with a key).
    pub value: Option<Bytes>,
    /// Headers, in order. Header keys are UTF-8 by convention; others are shown lossily.
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl ReceivedRecord {
    /// Bytes of key and value (for buffer accounting).
    pub fn size_bytes(&self) -> usize {
        self.key.as_ref().map_or(0, Bytes::len) + self.value.as_ref().map_or(0, Bytes::len)
    }
}

/// A successful produce of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// Offset of the first record (`None` with [`Acks::None`]).
    pub base_offset: Option<u64>,
}

/// Where a produced record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Partition.
    pub partition: u32,
    /// Offset (`None` with [`Acks::None`]).
    pub offset: Option<u64>,
}

/// Which records a read may see (Kafka's `isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Up to the last stable offset: records of open transactions not yet, of aborted ones
    /// never. Rill's default, for consumers and for the wire.
    #[default]
    ReadCommitted,
    /// Up to the high watermark: records of open and aborted transactions too.
    ReadUncommitted,
}

impl IsolationLevel {
    pub(crate) fn to_wire(self) -> rill_proto::records::IsolationLevel {
        match self {
            Self::ReadCommitted => rill_proto::records::IsolationLevel::ReadCommitted,
            Self::ReadUncommitted => rill_proto::records::IsolationLevel::ReadUncommitted,
        }
    }
}

/// What a fetch returned for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchedPartition {
    /// Records at or after the requested offset, in order (control records, the transaction
    /// markers, are not delivered; they take offsets all the same).
    pub records: Vec<ReceivedRecord>,
    /// The partition's high watermark.
    pub high_watermark: u64,
    /// The partition's last stable offset: below it every transaction is decided.
    pub last_stable_offset: u64,
    /// The partition's log start offset: records below it are deleted.
    pub log_start_offset: u64,
    /// The offset to fetch next: past every batch returned, control batches included, and past
    /// what a `read_committed` fetch left out (aborted transactions).
    pub next_offset: u64,
}
