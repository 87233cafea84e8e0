//! Record batches: the unit a producer sends, the server stores and a consumer reads.
//!
//! A batch is stored exactly as the producer encoded it; the server checks it once on produce
//! ([`validate`]) and never re-encodes the records. The checksum covers the record count, the
//! compression codec and the (compressed) record bytes, so neither can change undetected.

use bytes::Bytes;
use prost::Message;

use crate::common::{Compression, Record, RecordBatch, RecordList};

/// Upper bound on a batch's decompressed size. Protects the server from decompression bombs;
/// far above any sane `max.message.bytes`.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 << 20;

/// Why a batch is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("batch checksum mismatch: header says {expected:#010x}, bytes give {actual:#010x}")]
    Checksum { expected: u32, actual: u32 },
    #[error("batch declares {declared} records but holds {actual}")]
    CountMismatch { declared: u32, actual: usize },
    #[error("batch holds no records")]
    Empty,
    #[error("compression codec {0} is not supported")]
    UnsupportedCompression(i32),
    #[error("batch records could not be decoded: {0}")]
    Undecodable(String),
    #[error("batch decompresses to more than {MAX_DECOMPRESSED_BATCH_BYTES} bytes")]
    TooLargeDecompressed,
}

/// CRC-32C over `record_count ‖ compression ‖ producer_id ‖ producer_epoch ‖ base_sequence ‖
/// records` (little-endian integers): everything a batch carries except the fields the server
/// fills in (base offset, append time).
pub fn checksum(batch: &RecordBatch) -> u32 {
    let mut crc = crc32c::crc32c(&batch.record_count.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &batch.compression.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &batch.producer_id.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &batch.producer_epoch.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &batch.base_sequence.to_le_bytes());
    crc32c::crc32c_append(crc, &batch.records)
}

/// Stamps `batch` as idempotent (`producer_id` > 0) and recomputes its checksum.
pub fn set_producer(batch: &mut RecordBatch, producer_id: i64, producer_epoch: i32, base_sequence: i32) {
    batch.producer_id = producer_id;
    batch.producer_epoch = producer_epoch;
    batch.base_sequence = base_sequence;
    batch.crc32c = checksum(batch);
}

/// Builds a checksummed batch from `records`, compressed with `compression`.
pub fn build(records: Vec<Record>, compression: Compression) -> Result<RecordBatch, BatchError> {
    let record_count = u32::try_from(records.len()).map_err(|_| BatchError::Undecodable("too many records".into()))?;
    let encoded = RecordList { records }.encode_to_vec();
    let payload: Bytes = match compression {
        Compression::None => encoded.into(),
        Compression::Lz4 => lz4_flex::compress_prepend_size(&encoded).into(),
        Compression::Zstd => return Err(BatchError::UnsupportedCompression(compression as i32)),
    };
    let mut batch = RecordBatch {
        base_offset: 0,
        record_count,
        compression: compression as i32,
        crc32c: 0,
        records: payload,
        append_time_ms: 0,
        producer_id: 0,
        producer_epoch: 0,
        base_sequence: 0,
    };
    batch.crc32c = checksum(&batch);
    Ok(batch)
}

/// Checks the checksum, decompresses and decodes the records, and checks the declared count.
pub fn decode(batch: &RecordBatch) -> Result<Vec<Record>, BatchError> {
    let actual = checksum(batch);
    if actual != batch.crc32c {
        return Err(BatchError::Checksum { expected: batch.crc32c, actual });
    }
    let plain: Bytes = match Compression::try_from(batch.compression) {
        Ok(Compression::None) => batch.records.clone(),
        Ok(Compression::Lz4) => {
            let declared = batch.records.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
            match declared {
                Some(n) if n <= MAX_DECOMPRESSED_BATCH_BYTES => {}
                Some(_) => return Err(BatchError::TooLargeDecompressed),
                None => return Err(BatchError::Undecodable("lz4 payload too short".into())),
            }
            lz4_flex::decompress_size_prepended(&batch.records)
                .map_err(|e| BatchError::Undecodable(e.to_string()))?
                .into()
        }
        _ => return Err(BatchError::UnsupportedCompression(batch.compression)),
    };
    let list = RecordList::decode(plain).map_err(|e| BatchError::Undecodable(e.to_string()))?;
    if list.records.is_empty() {
        return Err(BatchError::Empty);
    }
    if list.records.len() != batch.record_count as usize {
        return Err(BatchError::CountMismatch { declared: batch.record_count, actual: list.records.len() });
    }
    Ok(list.records)
}

/// What the server checks before appending a batch: everything [`decode`] checks.
pub fn validate(batch: &RecordBatch) -> Result<(), BatchError> {
    decode(batch).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: &str) -> Record {
        Record {
            timestamp_ms: 1,
            key: Some(Bytes::from_static(b"k")),
            value: Bytes::copy_from_slice(v.as_bytes()),
            headers: vec![],
        }
    }

    #[test]
    fn round_trips_plain_and_lz4() {
        for c in [Compression::None, Compression::Lz4] {
            let b = build(vec![rec("a"), rec("bb")], c).unwrap();
            let got = decode(&b).unwrap();
            assert_eq!(got, vec![rec("a"), rec("bb")]);
        }
    }

    #[test]
    fn detects_flipped_byte_and_changed_count() {
        let mut b = build(vec![rec("hello")], Compression::None).unwrap();
        let mut bytes = b.records.to_vec();
        bytes[3] ^= 0x40;
        b.records = bytes.into();
        assert!(matches!(decode(&b), Err(BatchError::Checksum { .. })));

        let mut b = build(vec![rec("hello")], Compression::None).unwrap();
        b.record_count = 2;
        assert!(matches!(decode(&b), Err(BatchError::Checksum { .. })));

        let mut b = build(vec![rec("hello")], Compression::None).unwrap();
        set_producer(&mut b, 7, 0, 3);
        assert!(decode(&b).is_ok());
        b.base_sequence = 4;
        assert!(matches!(decode(&b), Err(BatchError::Checksum { .. })), "producer fields are covered");
    }

    #[test]
    fn rejects_lying_count_with_valid_checksum() {
        let mut b = build(vec![rec("x"), rec("y")], Compression::None).unwrap();
        b.record_count = 3;
        b.crc32c = checksum(&b);
        assert_eq!(decode(&b), Err(BatchError::CountMismatch { declared: 3, actual: 2 }));
    }

    #[test]
    fn rejects_empty_and_unknown_codec() {
        let b = build(vec![], Compression::None).unwrap();
        assert_eq!(decode(&b), Err(BatchError::Empty));
        let mut b = build(vec![rec("x")], Compression::None).unwrap();
        b.compression = 9;
        b.crc32c = checksum(&b);
        assert_eq!(decode(&b), Err(BatchError::UnsupportedCompression(9)));
    }

    #[test]
    fn refuses_lz4_bomb_header() {
        let mut payload = (u32::MAX).to_le_bytes().to_vec();
        payload.extend_from_slice(b"junk");
        let mut b = RecordBatch {
            base_offset: 0,
            record_count: 1,
            compression: Compression::Lz4 as i32,
            crc32c: 0,
            records: payload.into(),
            append_time_ms: 0,
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
        };
        b.crc32c = checksum(&b);
        assert_eq!(decode(&b), Err(BatchError::TooLargeDecompressed));
    }
}
