//! [`BatchInfo`]: the fixed header of a record batch, read and checked without touching the
//! records.

use bytes::BufMut;

use crate::compression::Compression;
use crate::error::BatchError;

/// Bytes of the fixed header, up to and including the record count.
pub const BATCH_HEADER_LEN: usize = 61;
/// `producerId` of a batch without a producer (not idempotent).
pub const NO_PRODUCER_ID: i64 = -1;
/// `producerEpoch` of a batch without a producer.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `baseSequence` of a batch without sequence numbers.
pub const NO_SEQUENCE: i32 = -1;
/// The only batch format read and written.
pub const MAGIC: i8 = 2;

/// Byte offsets of the header fields.
pub(crate) mod at {
    pub const BATCH_LENGTH: usize = 8;
    pub const LEADER_EPOCH: usize = 12;
    pub const MAGIC: usize = 16;
    pub const CRC: usize = 17;
    /// The CRC covers everything from here to the end of the batch.
    pub const ATTRIBUTES: usize = 21;
    pub const LAST_OFFSET_DELTA: usize = 23;
    pub const BASE_TIMESTAMP: usize = 27;
    pub const MAX_TIMESTAMP: usize = 35;
    pub const PRODUCER_ID: usize = 43;
    pub const PRODUCER_EPOCH: usize = 51;
    pub const BASE_SEQUENCE: usize = 53;
    pub const RECORD_COUNT: usize = 57;
}

/// Bytes before the `batchLength` field's count starts (base offset and the field itself).
const LOG_OVERHEAD: usize = 12;

pub(crate) const ATTR_COMPRESSION: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
const ATTR_DELETE_HORIZON: i16 = 0x40;

/// What a record's timestamp means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// Set by the producer when it created the record.
    #[default]
    CreateTime,
    /// Set by the broker when it appended the batch.
    LogAppendTime,
}

/// The fixed header of one record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Offset of the first record as the batch says (a producer sends 0; the log decides).
    pub base_offset: i64,
    /// Bytes of the whole batch, header included.
    pub size: usize,
    /// The leader epoch the batch was appended under, as the batch says.
    pub partition_leader_epoch: i32,
    /// The raw attributes.
    pub attributes: i16,
    /// Offset of the last record relative to the first — as produced. Compaction keeps it when
    /// it drops records (the last one included), so the batch still covers the same offsets:
    /// see [`BatchInfo::span`].
    pub last_offset_delta: i32,
    /// Timestamp of the first record (the base the records' deltas count from).
    pub base_timestamp: i64,
    /// The largest record timestamp.
    pub max_timestamp: i64,
    /// Producer id, or [`NO_PRODUCER_ID`].
    pub producer_id: i64,
    /// Producer epoch, or [`NO_PRODUCER_EPOCH`].
    pub producer_epoch: i16,
    /// Sequence number of the first record, or [`NO_SEQUENCE`].
    pub base_sequence: i32,
    /// Number of records the batch holds. Equal to [`BatchInfo::span`] in a batch as produced;
    /// smaller, down to 0, in one compaction rewrote. Never advance an offset by it.
    pub record_count: i32,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchInfo {
    /// Reads the header of the batch that `bytes` holds exactly: the length field must match
    /// `bytes.len()`, the magic must be 2 and the CRC-32C must match. The records are not read.
    pub fn parse(bytes: &[u8]) -> Result<Self, BatchError> {
        let info = Self::parse_stored(bytes)?;
        let expected = u32::from_be_bytes([bytes[at::CRC], bytes[at::CRC + 1], bytes[at::CRC + 2], bytes[at::CRC + 3]]);
        let actual = crc32c::crc32c(&bytes[at::ATTRIBUTES..]);
        if expected != actual {
            return Err(BatchError::Checksum { expected, actual });
        }
        Ok(info)
    }

    /// [`BatchInfo::parse`] without the CRC: for a batch checked when it was produced and read
    /// back from the partition's own log (lengths, magic and codec are still checked).
    pub fn parse_stored(bytes: &[u8]) -> Result<Self, BatchError> {
        if bytes.len() < BATCH_HEADER_LEN {
            return Err(BatchError::TooShort { len: bytes.len() });
        }
        // Indexing below stays within the checked header length.
        let declared = i64::from(be_i32(bytes, at::BATCH_LENGTH)) + LOG_OVERHEAD as i64;
        if declared != bytes.len() as i64 {
            return Err(BatchError::LengthMismatch { declared, actual: bytes.len() });
        }
        let magic = bytes[at::MAGIC] as i8;
        if magic != MAGIC {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let info = Self {
            base_offset: be_i64(bytes, 0),
            size: bytes.len(),
            partition_leader_epoch: be_i32(bytes, at::LEADER_EPOCH),
            attributes: be_i16(bytes, at::ATTRIBUTES),
            last_offset_delta: be_i32(bytes, at::LAST_OFFSET_DELTA),
            base_timestamp: be_i64(bytes, at::BASE_TIMESTAMP),
            max_timestamp: be_i64(bytes, at::MAX_TIMESTAMP),
            producer_id: be_i64(bytes, at::PRODUCER_ID),
            producer_epoch: be_i16(bytes, at::PRODUCER_EPOCH),
            base_sequence: be_i32(bytes, at::BASE_SEQUENCE),
            record_count: be_i32(bytes, at::RECORD_COUNT),
        };
        info.compression()?;
        Ok(info)
    }

    /// How many offsets the batch occupies: `last_offset_delta + 1` (0 for a negative, hence
    /// garbage, delta). The next batch starts this many offsets after this one's base.
    ///
    /// Compaction ([`crate::compact`]) drops records but keeps `last_offset_delta`, so in a
    /// rewritten batch [`BatchInfo::record_count`] may be smaller than the span, even 0: every
    /// consumer of stored batches — offset assignment on replay, fetch, the producer state a
    /// batch advances — must advance by the span, never by the record count.
    pub fn span(&self) -> u64 {
        u64::try_from(self.last_offset_delta).map_or(0, |d| d.saturating_add(1))
    }

    /// The codec of the records.
    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_bits(self.attributes & ATTR_COMPRESSION)
    }

    /// What the record timestamps mean.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_LOG_APPEND_TIME != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// True when the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// True for a control batch (a transaction marker), which consumers do not deliver.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// True when compaction stamped a delete horizon (in `base_timestamp`).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & ATTR_DELETE_HORIZON != 0
    }

    /// True when the batch carries a producer id (idempotent or transactional).
    pub fn has_producer(&self) -> bool {
        self.producer_id >= 0
    }
}

/// The attribute bits of a batch.
pub(crate) fn attributes(
    compression: Compression,
    timestamp: TimestampType,
    transactional: bool,
    control: bool,
) -> i16 {
    let mut a = compression.bits();
    if timestamp == TimestampType::LogAppendTime {
        a |= ATTR_LOG_APPEND_TIME;
    }
    if transactional {
        a |= ATTR_TRANSACTIONAL;
    }
    if control {
        a |= ATTR_CONTROL;
    }
    a
}

/// Writes a whole batch: the header `h` describes (its `size` is ignored) and `records`
/// (already compressed), with the length and CRC filled in.
pub(crate) fn write_batch(h: &BatchInfo, records: &[u8]) -> Result<Vec<u8>, BatchError> {
    let total = BATCH_HEADER_LEN + records.len();
    let batch_length = i32::try_from(total - LOG_OVERHEAD)
        .map_err(|_| BatchError::Encoding(format!("a batch of {total} bytes is too large")))?;
    let mut out = Vec::with_capacity(total);
    out.put_i64(h.base_offset);
    out.put_i32(batch_length);
    out.put_i32(h.partition_leader_epoch);
    out.put_i8(MAGIC);
    out.put_u32(0);
    out.put_i16(h.attributes);
    out.put_i32(h.last_offset_delta);
    out.put_i64(h.base_timestamp);
    out.put_i64(h.max_timestamp);
    out.put_i64(h.producer_id);
    out.put_i16(h.producer_epoch);
    out.put_i32(h.base_sequence);
    out.put_i32(h.record_count);
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(&out[at::ATTRIBUTES..]);
    out[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}
