//! Encoding ([`BatchBuilder`]), produce-time validation ([`validate`]) and decoding
//! ([`decode`]) of whole batches.

use bytes::Bytes;

use crate::compression::Compression;
use crate::error::BatchError;
use crate::header::{self, BatchInfo, TimestampType, BATCH_HEADER_LEN, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE};
use crate::record::{Record, RecordReader, MIN_RECORD_BYTES};

/// Builds one batch. Records get offset deltas 0, 1, 2, … in the order they are pushed.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    compression: Compression,
    timestamp_type: TimestampType,
    producer: (i64, i16, i32),
    transactional: bool,
    control: bool,
    records: Vec<Record>,
}

impl BatchBuilder {
    /// An empty batch compressed with `compression`, without a producer id.
    pub fn new(compression: Compression) -> Self {
        Self {
            compression,
            timestamp_type: TimestampType::CreateTime,
            producer: (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
            transactional: false,
            control: false,
            records: Vec::new(),
        }
    }

    /// Stamps the batch as written by producer `id` at `epoch`, its first record having
    /// sequence number `base_sequence`.
    pub fn producer(mut self, id: i64, epoch: i16, base_sequence: i32) -> Self {
        self.producer = (id, epoch, base_sequence);
        self
    }

    /// Marks the batch as part of a transaction.
    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    /// Marks the batch as a control batch (see [`crate::control`]).
    pub(crate) fn control(mut self) -> Self {
        self.control = true;
        self
    }

    /// Appends a record; its offset delta becomes its position in the batch.
    pub fn push(&mut self, mut record: Record) -> Result<(), BatchError> {
        record.offset_delta = i32::try_from(self.records.len())
            .map_err(|_| BatchError::Encoding("too many records for one batch".into()))?;
        self.records.push(record);
        Ok(())
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The encoded batch.
    pub fn build(&self) -> Result<Bytes, BatchError> {
        let first = self.records.first().ok_or(BatchError::Empty)?;
        let base_timestamp = first.timestamp_ms;
        let max_timestamp = self.records.iter().map(|r| r.timestamp_ms).max().unwrap_or(base_timestamp);
        let plain_len: usize = self.records.iter().map(|r| r.encoded_len(base_timestamp)).sum();
        let mut plain = Vec::with_capacity(plain_len);
        for r in &self.records {
            r.encode(base_timestamp, &mut plain).map_err(BatchError::Encoding)?;
        }
        let records = match self.compression {
            Compression::None => plain,
            c => c.compress(&plain)?,
        };
        let count = i32::try_from(self.records.len()).map_err(|_| BatchError::Encoding("too many records".into()))?;
        let (producer_id, producer_epoch, base_sequence) = self.producer;
        // As a producer sends it: base offset 0 and no leader epoch (the log decides both).
        let fields = BatchInfo {
            base_offset: 0,
            size: 0,
            partition_leader_epoch: -1,
            attributes: header::attributes(self.compression, self.timestamp_type, self.transactional, self.control),
            last_offset_delta: count - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count: count,
        };
        header::write_batch(&fields, &records).map(Bytes::from)
    }
}

/// A decoded batch: its header and its records (fields are slices of the batch, or of its
/// decompressed records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBatch {
    /// The header.
    pub info: BatchInfo,
    /// The records, in offset order.
    pub records: Vec<Record>,
}

/// The decompressed records region of a checked batch, its declared record count checked
/// against what the region can hold. A count of 0 is refused unless `allow_empty` (a batch as
/// produced holds at least one record; one that compaction emptied holds none).
pub(crate) fn records_region(
    bytes: &Bytes,
    info: &BatchInfo,
    limit: usize,
    allow_empty: bool,
) -> Result<Bytes, BatchError> {
    let region = bytes.slice(BATCH_HEADER_LEN..);
    let plain = match info.compression()? {
        Compression::None if region.len() > limit => return Err(BatchError::TooLargeDecompressed { limit }),
        Compression::None => region,
        c => Bytes::from(c.decompress(&region, limit)?),
    };
    let count = usize::try_from(info.record_count)
        .map_err(|_| BatchError::CountMismatch { declared: i64::from(info.record_count), actual: 0 })?;
    if count == 0 && !allow_empty {
        return Err(BatchError::Empty);
    }
    // Bound the declared count by what the bytes can hold before trusting it for anything.
    if count > plain.len() / MIN_RECORD_BYTES {
        return Err(BatchError::CountMismatch {
            declared: i64::from(info.record_count),
            actual: plain.len() / MIN_RECORD_BYTES,
        });
    }
    Ok(plain)
}

/// What a partition checks once, when a batch is produced: the header and CRC, a known codec,
/// at least one record, records that decompress within `limit` bytes and parse exactly, with
/// offset deltas 0, 1, 2, … matching the record count. Returns the header.
pub fn validate(bytes: &Bytes, limit: usize) -> Result<BatchInfo, BatchError> {
    let info = BatchInfo::parse(bytes)?;
    let plain = records_region(bytes, &info, limit, false)?;
    if info.last_offset_delta != info.record_count - 1 {
        return Err(BatchError::LastOffsetDelta {
            last_offset_delta: info.last_offset_delta,
            record_count: info.record_count,
        });
    }
    let mut reader = RecordReader::new(&plain);
    for index in 0..info.record_count as usize {
        let (delta, _) =
            reader.next(info.base_timestamp, false).map_err(|reason| BatchError::Record { index, reason })?;
        let delta = i64::from(delta);
        if delta != index as i64 {
            return Err(BatchError::OffsetDelta { index, delta });
        }
    }
    if reader.remaining() > 0 {
        return Err(BatchError::Record {
            index: info.record_count as usize,
            reason: format!("{} bytes follow the last of the {} records", reader.remaining(), info.record_count),
        });
    }
    Ok(info)
}

/// Decodes a batch fetched from a partition: the header and CRC are checked, the records
/// decompressed within `limit` bytes and read; their offset deltas must increase (a compacted
/// batch may skip some) and stay within the header's last offset delta. A batch compaction
/// emptied (see [`crate::compact`]) decodes to no records; it still occupies
/// [`BatchInfo::span`] offsets.
pub fn decode(bytes: &Bytes, limit: usize) -> Result<DecodedBatch, BatchError> {
    let info = BatchInfo::parse(bytes)?;
    let plain = records_region(bytes, &info, limit, true)?;
    let count = info.record_count as usize;
    let mut reader = RecordReader::new(&plain);
    let mut records = Vec::with_capacity(count);
    let mut previous: i64 = -1;
    for index in 0..count {
        let (_, Some(r)) =
            reader.next(info.base_timestamp, true).map_err(|reason| BatchError::Record { index, reason })?
        else {
            return Err(BatchError::Record { index, reason: "record missing".into() });
        };
        let delta = i64::from(r.offset_delta);
        if delta <= previous || delta > i64::from(info.last_offset_delta) {
            return Err(BatchError::OffsetDelta { index, delta });
        }
        previous = delta;
        records.push(r);
    }
    if reader.remaining() > 0 {
        return Err(BatchError::CountMismatch { declared: i64::from(info.record_count), actual: count + 1 });
    }
    Ok(DecodedBatch { info, records })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::control::{ControlKind, ControlMarker};
    use crate::record::Header;
    use crate::MAX_DECOMPRESSED_BATCH_BYTES as LIMIT;

    fn rec(ts: i64, key: Option<&'static str>, value: Option<&'static str>) -> Record {
        Record {
            offset_delta: 0,
            timestamp_ms: ts,
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: value.map(|v| Bytes::from_static(v.as_bytes())),
            headers: vec![],
        }
    }

    fn build(compression: Compression, records: Vec<Record>) -> Bytes {
        let mut b = BatchBuilder::new(compression).producer(7, 3, 40);
        for r in records {
            b.push(r).unwrap();
        }
        b.build().unwrap()
    }

    #[test]
    fn round_trips_nulls_headers_producer_fields_and_every_codec() {
        let mut with_headers = rec(1_000, Some("k"), Some("v"));
        with_headers.headers = vec![
            Header { key: Bytes::from_static(b"h"), value: Some(Bytes::from_static(b"1")) },
            Header { key: Bytes::from_static(b"h"), value: None },
        ];
        let records =
            vec![with_headers, rec(990, Some("gone"), None), rec(1_005, None, Some("")), rec(1_001, None, None)];
        for c in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let bytes = build(c, records.clone());
            let info = validate(&bytes, LIMIT).unwrap();
            assert_eq!((info.record_count, info.last_offset_delta), (4, 3));
            assert_eq!((info.producer_id, info.producer_epoch, info.base_sequence), (7, 3, 40));
            assert_eq!((info.base_timestamp, info.max_timestamp), (1_000, 1_005));
            assert_eq!(info.compression().unwrap(), c);
            assert!(!info.is_transactional() && !info.is_control());
            let d = decode(&bytes, LIMIT).unwrap();
            let mut expected = records.clone();
            for (i, r) in expected.iter_mut().enumerate() {
                r.offset_delta = i as i32;
            }
            assert_eq!(d.records, expected, "{c:?}");
        }
    }

    #[test]
    fn reads_a_batch_another_encoder_wrote() {
        // The batch in the kafka-protocol crate's FetchResponse example, encoded by hand there:
        // one record (key "hello", value "world", timestamp delta 1000, offset delta 1, record
        // attributes 1, which Kafka ignores) under a last offset delta of 3.
        let batch: [u8; 79] = [
            0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x43, 0x0, 0x0, 0x0, 0x0, 0x2, 0x73, 0x6d, 0x29,
            0x7b, 0x0, 0b00000000, 0x0, 0x0, 0x0, 0x3, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x1, 0x0, 0x0,
            0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x1,
            0x22, 0x1, 0xd0, 0xf, 0x2, 0xa, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0xa, 0x77, 0x6f, 0x72, 0x6c, 0x64, 0x0,
        ];
        let bytes = Bytes::copy_from_slice(&batch);
        let info = BatchInfo::parse(&bytes).unwrap();
        assert_eq!((info.record_count, info.last_offset_delta), (1, 3));
        let d = decode(&bytes, LIMIT).unwrap();
        assert_eq!(d.records.len(), 1);
        assert_eq!(d.records[0].key.as_deref(), Some(&b"hello"[..]));
        assert_eq!(d.records[0].value.as_deref(), Some(&b"world"[..]));
        assert_eq!((d.records[0].offset_delta, d.records[0].timestamp_ms), (1, 1000));
        assert!(validate(&bytes, LIMIT).is_err(), "offsets not dense from 0: not acceptable on produce");
    }

    #[test]
    fn validation_refuses_damage_and_lies() {
        let good = build(Compression::None, vec![rec(1, Some("k"), Some("v")), rec(2, None, Some("w"))]);
        assert!(validate(&good, LIMIT).is_ok());

        let mut flipped = good.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(validate(&flipped.into(), LIMIT), Err(BatchError::Checksum { .. })));

        assert!(matches!(validate(&good.slice(..60), LIMIT), Err(BatchError::TooShort { .. })));
        assert!(matches!(validate(&good.slice(..good.len() - 1), LIMIT), Err(BatchError::LengthMismatch { .. })));

        let mut magic = good.to_vec();
        magic[16] = 1;
        assert!(matches!(validate(&magic.into(), LIMIT), Err(BatchError::UnsupportedMagic(1))));

        // Rewrites a header field and fixes the CRC, as a careful liar would.
        let lie = |at: usize, bytes: &[u8]| -> Bytes {
            let mut v = good.to_vec();
            v[at..at + bytes.len()].copy_from_slice(bytes);
            let crc = crc32c::crc32c(&v[21..]);
            v[17..21].copy_from_slice(&crc.to_be_bytes());
            v.into()
        };
        assert!(matches!(
            validate(&lie(57, &3i32.to_be_bytes()), LIMIT),
            Err(BatchError::CountMismatch { .. } | BatchError::Record { .. })
        ));
        assert!(matches!(validate(&lie(57, &i32::MAX.to_be_bytes()), LIMIT), Err(BatchError::CountMismatch { .. })));
        assert!(matches!(validate(&lie(57, &(-1i32).to_be_bytes()), LIMIT), Err(BatchError::CountMismatch { .. })));
        assert!(matches!(
            validate(&lie(57, &1i32.to_be_bytes()), LIMIT),
            Err(BatchError::LastOffsetDelta { .. } | BatchError::Record { .. })
        ));
        assert!(matches!(validate(&lie(23, &5i32.to_be_bytes()), LIMIT), Err(BatchError::LastOffsetDelta { .. })));
        assert!(matches!(validate(&lie(21, &7i16.to_be_bytes()), LIMIT), Err(BatchError::UnsupportedCompression(7))));

        let gaps = {
            let mut b = BatchBuilder::new(Compression::None);
            b.push(rec(1, None, Some("a"))).unwrap();
            b.push(rec(1, None, Some("b"))).unwrap();
            b.records[1].offset_delta = 5;
            b.build().unwrap()
        };
        assert!(matches!(validate(&gaps, LIMIT), Err(BatchError::OffsetDelta { index: 1, delta: 5 })));
        let empty = BatchBuilder::new(Compression::None);
        assert_eq!(empty.build(), Err(BatchError::Empty));
    }

    #[test]
    fn a_bomb_is_refused_within_its_limit() {
        let mut b = BatchBuilder::new(Compression::Lz4);
        for _ in 0..2_000 {
            b.push(Record { value: Some(Bytes::from(vec![0u8; 10_000])), ..Record::default() }).unwrap();
        }
        let bytes = b.build().unwrap();
        assert!(bytes.len() < 1 << 20, "20 MB of zeros pack small: {}", bytes.len());
        assert_eq!(validate(&bytes, 1 << 20), Err(BatchError::TooLargeDecompressed { limit: 1 << 20 }));
        assert!(validate(&bytes, 32 << 20).is_ok());
    }

    #[test]
    fn control_batches_carry_markers() {
        let marker = ControlMarker { kind: ControlKind::Commit, coordinator_epoch: 9, transaction: 0 };
        let bytes = marker.batch(42, 2, 5_000).unwrap();
        let d = decode(&bytes, LIMIT).unwrap();
        assert!(d.info.is_control() && d.info.is_transactional());
        assert_eq!((d.info.producer_id, d.info.producer_epoch, d.info.record_count), (42, 2, 1));
        assert_eq!(ControlMarker::parse(&d.records[0]).unwrap(), marker);
        let abort = ControlMarker { kind: ControlKind::Abort, coordinator_epoch: 0, transaction: 0 };
        let d = decode(&abort.batch(42, 2, 5_000).unwrap(), LIMIT).unwrap();
        assert_eq!(ControlMarker::parse(&d.records[0]).unwrap().kind, ControlKind::Abort);
    }

    fn arb_bytes() -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from))
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        (
            any::<i64>(),
            arb_bytes(),
            arb_bytes(),
            proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..10), arb_bytes())
                    .prop_map(|(k, v)| Header { key: Bytes::from(k), value: v }),
                0..4,
            ),
        )
            .prop_map(|(ts, key, value, headers)| Record {
                offset_delta: 0,
                timestamp_ms: ts / 4,
                key,
                value,
                headers,
            })
    }

    proptest! {
        #[test]
        fn any_records_round_trip(records in proptest::collection::vec(arb_record(), 1..20), codec in 0i16..5) {
            let c = Compression::from_bits(codec).unwrap();
            let mut b = BatchBuilder::new(c);
            for r in &records {
                b.push(r.clone()).unwrap();
            }
            let bytes = b.build().unwrap();
            prop_assert!(validate(&bytes, LIMIT).is_ok());
            let d = decode(&bytes, LIMIT).unwrap();
            prop_assert_eq!(d.records.len(), records.len());
            for (i, (got, want)) in d.records.iter().zip(&records).enumerate() {
                prop_assert_eq!(got.offset_delta, i as i32);
                prop_assert_eq!(&got.key, &want.key);
                prop_assert_eq!(&got.value, &want.value);
                prop_assert_eq!(&got.headers, &want.headers);
                prop_assert_eq!(got.timestamp_ms, want.timestamp_ms);
            }
        }

        #[test]
        fn any_bytes_are_refused_or_read_without_panicking(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let bytes = Bytes::from(data);
            let _ = validate(&bytes, 1 << 16);
            let _ = decode(&bytes, 1 << 16);
        }

        #[test]
        fn a_damaged_valid_batch_never_panics(records in proptest::collection::vec(arb_record(), 1..5), at in 0usize..400, byte in any::<u8>()) {
            let mut b = BatchBuilder::new(Compression::None);
            for r in &records {
                b.push(r.clone()).unwrap();
            }
            let mut v = b.build().unwrap().to_vec();
            let i = at % v.len();
            v[i] = byte;
            // Keep the CRC right so the record parser itself is exercised.
            if v.len() >= 21 {
                let crc = crc32c::crc32c(&v[21..]);
                v[17..21].copy_from_slice(&crc.to_be_bytes());
            }
            let bytes = Bytes::from(v);
            let _ = validate(&bytes, 1 << 16);
            let _ = decode(&bytes, 1 << 16);
        }
    }
}
