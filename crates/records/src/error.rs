//! Why a batch is not acceptable.

/// A malformed, damaged or refused record batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes than a batch header.
    #[error("record batch of {len} bytes is shorter than the {} byte header", crate::BATCH_HEADER_LEN)]
    TooShort { len: usize },
    /// The batch length field disagrees with the bytes given.
    #[error("record batch declares {declared} bytes but {actual} were sent")]
    LengthMismatch { declared: i64, actual: usize },
    /// Not a magic 2 batch.
    #[error("record batch magic {0} is not supported (only magic 2, Kafka 0.11 and later)")]
    UnsupportedMagic(i8),
    /// The CRC-32C over attributes..end does not match.
    #[error("record batch checksum mismatch: header says {expected:#010x}, bytes give {actual:#010x}")]
    Checksum { expected: u32, actual: u32 },
    /// The attributes name an unknown codec.
    #[error("compression codec {0} is not supported")]
    UnsupportedCompression(i16),
    /// No records.
    #[error("record batch holds no records")]
    Empty,
    /// The record count field and the records disagree.
    #[error("record batch declares {declared} records but holds {actual}")]
    CountMismatch { declared: i64, actual: usize },
    /// The offsets of the records are not 0, 1, 2, … (dense).
    #[error("record {index} of the batch has offset delta {delta}; offsets must be dense")]
    OffsetDelta { index: usize, delta: i64 },
    /// lastOffsetDelta disagrees with the record count.
    #[error("record batch has last offset delta {last_offset_delta} for {record_count} records")]
    LastOffsetDelta { last_offset_delta: i32, record_count: i32 },
    /// A record is malformed.
    #[error("record {index} is malformed: {reason}")]
    Record { index: usize, reason: String },
    /// The compressed records could not be decompressed.
    #[error("records could not be decompressed ({codec}): {reason}")]
    Decompression { codec: &'static str, reason: String },
    /// Decompression passed the limit.
    #[error("records decompress to more than {limit} bytes")]
    TooLargeDecompressed { limit: usize },
    /// The records could not be compressed (encoding only).
    #[error("records could not be compressed ({codec}): {reason}")]
    Compression { codec: &'static str, reason: String },
    /// A batch to encode breaks a format limit (encoding only).
    #[error("cannot encode the batch: {0}")]
    Encoding(String),
}

impl BatchError {
    /// True for an intact batch whose content is not acceptable (Kafka's `INVALID_RECORD`),
    /// false for damage (`CORRUPT_MESSAGE`) and unsupported codecs.
    pub fn is_invalid_record(&self) -> bool {
        matches!(self, Self::OffsetDelta { .. } | Self::LastOffsetDelta { .. } | Self::Empty)
    }
}
