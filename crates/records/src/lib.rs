//! Rill's record batch: Kafka's record batch format, magic 2, byte for byte.
//!
//! A batch is what a producer sends, what a partition stores (its Raft entries hold batches
//! exactly as produced) and what a consumer fetches — in the gRPC API and, later, on the Kafka
//! listener, where a fetch is then a copy of stored bytes. Why this format and not Rill's own
//! earlier one, with measurements: `docs/storage.md`, "Record batches".
//!
//! ```text
//!  baseOffset i64 │ batchLength i32 │ partitionLeaderEpoch i32 │ magic i8 = 2 │ crc u32 (CRC-32C) ─┐
//!  ┌──────────────────────────────────────────────────────────────────────────────────────────┘
//!  └► attributes i16 (codec, timestamp type, transactional, control) │ lastOffsetDelta i32 │
//!     baseTimestamp i64 │ maxTimestamp i64 │ producerId i64 │ producerEpoch i16 │ baseSequence i32 │
//!     recordCount i32 │ records (compressed as the attributes say)
//!  record: length · attributes · timestampDelta · offsetDelta · key (nullable) · value (nullable) ·
//!          headers (key, nullable value)            (zigzag varints)
//! ```
//!
//! * [`header`]: [`BatchInfo`] — the fixed header, read without touching the records.
//! * [`record`]: [`Record`] and [`Header`], one record's encoding.
//! * [`batch`]: [`BatchBuilder`] (encoding), [`validate`] (what a server checks once on produce)
//!   and [`decode`] (what a consumer reads).
//! * [`compact`]: [`retain`] — a stored batch rewritten to keep only some of its records, for
//!   log compaction: offsets preserved (a batch occupies [`BatchInfo::span`] offsets, whatever
//!   its record count), the kept records' bytes copied, deterministic output.
//! * [`control`]: control batches — transaction commit and abort markers.
//! * [`compression`]: gzip, snappy (xerial framing, as Kafka's Java client writes it), lz4
//!   (the LZ4 frame format Kafka uses) and zstd, decompressed under a bound checked while
//!   decompressing.
//! * [`varint`]: zigzag varints.
//!
//! Decoding trusts nothing a batch declares: counts and lengths are checked against the bytes
//! actually present before anything is allocated for them, and decompression stops at a limit.

pub mod batch;
pub mod compact;
pub mod compression;
pub mod control;
pub mod error;
pub mod header;
pub mod record;
pub mod varint;

pub use batch::{decode, validate, BatchBuilder, DecodedBatch};
pub use compact::{retain, RecordView, Retained};
pub use compression::Compression;
pub use control::{ControlKind, ControlMarker};
pub use error::BatchError;
pub use header::{BatchInfo, TimestampType, BATCH_HEADER_LEN, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE};
pub use record::{Header, Record};

/// Upper bound on a batch's decompressed records, whatever its codec: protects a server from
/// decompression bombs; far above any sane `max.message.bytes` times a realistic ratio.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 << 20;
