//! Rewriting a stored batch for log compaction ([`retain`]): keeping only some of its records,
//! as Kafka's log cleaner does under `cleanup.policy=compact`.
//!
//! ```text
//!  stored batch                                 rewritten batch
//!  header (lastOffsetDelta 4, recordCount 5)    header (lastOffsetDelta 4, recordCount 2, new CRC)
//!  records: r0 r1 r2 r3 r4       keep r1, r4 ►  records: r1 r4  (their bytes, recompressed)
//! ```
//!
//! Why it is done this way:
//!
//! * **Offsets are preserved.** A record's offset is the batch's base offset plus its offset
//!   delta, and a consumer's position, a committed offset and the producer state all name
//!   offsets. So the kept records are copied byte for byte — offset and timestamp deltas as
//!   written, against the same base offset and base timestamp — and the header keeps
//!   `lastOffsetDelta`: the batch still occupies [`BatchInfo::span`] offsets whatever it now
//!   holds. Only `recordCount`, `batchLength` and the CRC change. Copying the encodings rather
//!   than re-encoding decoded records means nothing about a kept record can change, not even
//!   an encoding detail Rill would not write (a record attribute byte, an overlong varint).
//! * **An emptied batch is kept.** When no record survives, the result is a batch of no
//!   records (uncompressed, the rest of its header unchanged), as Kafka keeps one: its offsets
//!   stay taken, so the log has no hole, and its producer id, epoch and sequence range survive
//!   for idempotence checks. Consumers skip it by its span. Whether such a batch may be dropped
//!   altogether is the caller's decision.
//! * **Control batches are never filtered.** Transaction markers are kept or dropped whole;
//!   that depends on the transaction's state, which the caller knows: [`retain`] returns them
//!   [`Retained::Unchanged`].
//! * **Deterministic.** Replicas compact independently and compare bytes, so the same batch and
//!   the same decisions give the same bytes on every run and every machine: nothing in the
//!   output depends on anything but the input and the decisions, and each codec compresses
//!   deterministically (what that rests on: [`Compression::compress`]). The same holds
//!   across repeated compaction: retaining again what a rewritten batch holds gives
//!   [`Retained::Unchanged`], and retaining a subset of it gives exactly what retaining that
//!   subset of the original gives.
//! * **Bounded, and checked first.** The batch is checked as [`crate::decode`] checks it (CRC
//!   included — a rewrite computes a fresh CRC, which must never bless damaged bytes); records
//!   are decompressed under the caller's limit; memory is a small multiple of the decompressed
//!   size. A batch `decode` refuses is refused with the same error, and a rewritten batch
//!   decodes under the same limit.

use bytes::Bytes;

use crate::batch::records_region;
use crate::compression::Compression;
use crate::error::BatchError;
use crate::header::{self, BatchInfo, ATTR_COMPRESSION};
use crate::record::RecordReader;

/// What [`retain`]'s `keep` sees of one record: what a cleaner decides on (the key's latest
/// offset, whether it is a tombstone, how old it is). Slices borrow the decompressed records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordView<'a> {
    /// Offset relative to the batch's base offset.
    pub offset_delta: i32,
    /// The record's timestamp, in ms (as [`crate::decode`] reports it).
    pub timestamp_ms: i64,
    /// The key; `None` is null.
    pub key: Option<&'a [u8]>,
    /// True when the value is null: with a key, a tombstone (a delete of that key).
    pub is_tombstone: bool,
}

/// What [`retain`] made of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retained {
    /// Keep the stored bytes: every record was kept, or the batch is a control batch. Nothing
    /// was allocated for a new batch.
    Unchanged,
    /// The batch rewritten to hold only the kept records (maybe none).
    Rewritten(Bytes),
}

/// Rewrites `batch` to hold only the records `keep` returns true for, offsets preserved (see
/// the module documentation for what is kept and why).
///
/// `keep` is called once per record, in offset order. The batch is checked while its records
/// are read, so on a damaged batch `keep` may have been called for the records before the
/// damage when the error is returned. Records are decompressed within `limit` bytes.
///
/// Returns [`Retained::Unchanged`] for a control batch (its records are not read) and when
/// every record is kept; otherwise the new batch: the same header but for `recordCount`,
/// `batchLength` and the CRC, and the kept records' encodings byte for byte, compressed again
/// with the batch's codec — or, when none is kept, an uncompressed batch of no records.
pub fn retain(
    batch: &Bytes,
    limit: usize,
    mut keep: impl FnMut(&RecordView<'_>) -> bool,
) -> Result<Retained, BatchError> {
    let info = BatchInfo::parse(batch)?;
    if info.is_control() {
        return Ok(Retained::Unchanged);
    }
    let codec = info.compression()?;
    let plain = records_region(batch, &info, limit, true)?;
    // records_region checked the count: not negative, and at most one record per 7 bytes.
    let count = usize::try_from(info.record_count).unwrap_or(0);
    let mut reader = RecordReader::new(&plain);
    // The kept records' encodings, from the first record dropped on (until then they are the
    // region's prefix, and nothing is copied).
    let mut kept: Option<Vec<u8>> = None;
    let mut kept_count: i32 = 0;
    let mut previous: i64 = -1;
    for index in 0..count {
        let r = reader.next_raw(info.base_timestamp).map_err(|reason| BatchError::Record { index, reason })?;
        // The rules decode applies: offset deltas increase and stay within the span.
        let delta = i64::from(r.offset_delta);
        if delta <= previous || delta > i64::from(info.last_offset_delta) {
            return Err(BatchError::OffsetDelta { index, delta });
        }
        previous = delta;
        let view = RecordView {
            offset_delta: r.offset_delta,
            timestamp_ms: r.timestamp_ms,
            key: r.key.as_deref(),
            is_tombstone: r.value.is_none(),
        };
        // The reader returns ranges within the region.
        let (before, encoding) = (&plain[..r.encoding.start], &plain[r.encoding]);
        if keep(&view) {
            kept_count += 1;
            if let Some(out) = kept.as_mut() {
                out.extend_from_slice(encoding);
            }
        } else if kept.is_none() {
            let mut out = Vec::with_capacity(plain.len() - encoding.len());
            out.extend_from_slice(before);
            kept = Some(out);
        }
    }
    if reader.remaining() > 0 {
        return Err(BatchError::CountMismatch { declared: i64::from(info.record_count), actual: count + 1 });
    }
    let Some(records) = kept else {
        return Ok(Retained::Unchanged);
    };
    let (attributes, region) = if kept_count == 0 {
        // Nothing to compress: an empty region under codec bits none, as Kafka writes it.
        (info.attributes & !ATTR_COMPRESSION, Vec::new())
    } else {
        match codec {
            Compression::None => (info.attributes, records),
            c => (info.attributes, c.compress(&records)?),
        }
    };
    let rewritten = BatchInfo { attributes, record_count: kept_count, ..info };
    header::write_batch(&rewritten, &region).map(|b| Retained::Rewritten(Bytes::from(b)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::batch::{decode, validate, BatchBuilder};
    use crate::control::{ControlKind, ControlMarker};
    use crate::header::BATCH_HEADER_LEN;
    use crate::record::{Header, Record};
    use crate::varint::put_varint;
    use crate::MAX_DECOMPRESSED_BATCH_BYTES as LIMIT;

    const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    fn rec(ts: i64, key: Option<&str>, value: Option<&str>, headers: usize) -> Record {
        Record {
            offset_delta: 0,
            timestamp_ms: ts,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: (0..headers)
                .map(|i| Header {
                    key: Bytes::from(format!("h{i}")),
                    value: (i % 2 == 0).then(|| Bytes::from(format!("v{i}"))),
                })
                .collect(),
        }
    }

    /// Six records: keys repeating, a tombstone, a null key, headers, timestamps out of order.
    fn records() -> Vec<Record> {
        vec![
            rec(10_000, Some("a"), Some("a1"), 0),
            rec(10_005, Some("b"), Some("b1"), 2),
            rec(9_990, Some("a"), Some("a2"), 1),
            rec(10_020, Some("b"), None, 0),
            rec(10_001, None, Some("keyless"), 3),
            rec(10_010, Some("c"), Some(&"c".repeat(300)), 0),
        ]
    }

    /// A stored batch: produced by producer 7 (epoch 3, sequences from 40), transactional, then
    /// placed by the log at offset 1000 under leader epoch 5 (fields the CRC does not cover).
    fn stored(compression: Compression, records: Vec<Record>) -> Bytes {
        let mut b = BatchBuilder::new(compression).producer(7, 3, 40).transactional(true);
        for r in records {
            b.push(r).unwrap();
        }
        let mut v = b.build().unwrap().to_vec();
        v[..8].copy_from_slice(&1_000i64.to_be_bytes());
        v[12..16].copy_from_slice(&5i32.to_be_bytes());
        v.into()
    }

    fn by_delta(mask: &[bool]) -> impl FnMut(&RecordView<'_>) -> bool + '_ {
        |r| mask.get(r.offset_delta as usize).copied().unwrap_or(true)
    }

    fn must_rewrite(batch: &Bytes, keep: impl FnMut(&RecordView<'_>) -> bool) -> Bytes {
        match retain(batch, LIMIT, keep).unwrap() {
            Retained::Rewritten(b) => b,
            Retained::Unchanged => panic!("expected a rewrite"),
        }
    }

    /// The batch after `retain`: the stored bytes when unchanged.
    fn applied(batch: &Bytes, mask: &[bool]) -> Bytes {
        match retain(batch, LIMIT, by_delta(mask)).unwrap() {
            Retained::Unchanged => batch.clone(),
            Retained::Rewritten(b) => b,
        }
    }

    /// The encodings of a batch's records, as stored.
    fn encodings(batch: &Bytes) -> Vec<Bytes> {
        let info = BatchInfo::parse(batch).unwrap();
        let plain = records_region(batch, &info, LIMIT, true).unwrap();
        let mut reader = RecordReader::new(&plain);
        (0..info.record_count).map(|_| plain.slice(reader.next_raw(info.base_timestamp).unwrap().encoding)).collect()
    }

    #[test]
    fn every_codec_keeps_the_chosen_records_as_they_were() {
        for c in ALL {
            let original = stored(c, records());
            let before = decode(&original, LIMIT).unwrap();
            // The cleaner's view: the latest record of each key, and the keyless one.
            let mut seen = Vec::new();
            let out = must_rewrite(&original, |r| {
                seen.push((r.offset_delta, r.key.map(<[u8]>::to_vec), r.is_tombstone, r.timestamp_ms));
                matches!(r.offset_delta, 2..=5)
            });
            let views: Vec<_> = before
                .records
                .iter()
                .map(|r| (r.offset_delta, r.key.as_ref().map(|k| k.to_vec()), r.value.is_none(), r.timestamp_ms))
                .collect();
            assert_eq!(seen, views, "{c:?}: keep sees every record, in order");

            let after = decode(&out, LIMIT).unwrap();
            assert_eq!(after.records, before.records[2..], "{c:?}");
            let info = after.info;
            assert_eq!(info.compression().unwrap(), c);
            assert_eq!(info.record_count, 4);
            assert_eq!((info.last_offset_delta, info.span()), (5, 6));
            assert_eq!(info, BatchInfo { record_count: 4, size: out.len(), ..before.info }, "{c:?}: header kept");
            assert_eq!(encodings(&out), encodings(&original)[2..], "{c:?}: encodings copied");
            assert!(matches!(validate(&out, LIMIT), Err(BatchError::LastOffsetDelta { .. })), "not a produce");
            assert_eq!(BatchInfo::parse_stored(&out).unwrap(), info);
        }
    }

    #[test]
    fn a_gap_in_the_middle_and_the_last_record_dropped() {
        for c in ALL {
            let original = stored(c, records());
            let before = decode(&original, LIMIT).unwrap();
            let out = must_rewrite(&original, |r| r.offset_delta % 2 == 0);
            let after = decode(&out, LIMIT).unwrap();
            let deltas: Vec<i32> = after.records.iter().map(|r| r.offset_delta).collect();
            assert_eq!(deltas, [0, 2, 4]);
            assert_eq!(after.records, [0, 2, 4].map(|i| before.records[i].clone()));
            // The last offset stays taken although its record is gone.
            assert_eq!((after.info.last_offset_delta, after.info.span(), after.info.record_count), (5, 6, 3));
        }
    }

    #[test]
    fn keeping_everything_changes_nothing() {
        for c in ALL {
            let original = stored(c, records());
            let mut calls = 0;
            let r = retain(&original, LIMIT, |_| {
                calls += 1;
                true
            });
            assert_eq!(r, Ok(Retained::Unchanged));
            assert_eq!(calls, 6);
        }
    }

    #[test]
    fn keeping_nothing_leaves_an_empty_batch_that_still_takes_its_offsets() {
        for c in ALL {
            let original = stored(c, records());
            let before = BatchInfo::parse(&original).unwrap();
            let out = must_rewrite(&original, |_| false);
            assert_eq!(out.len(), BATCH_HEADER_LEN);
            let info = BatchInfo::parse_stored(&out).unwrap();
            assert_eq!(
                info,
                BatchInfo {
                    size: BATCH_HEADER_LEN,
                    record_count: 0,
                    attributes: before.attributes & !ATTR_COMPRESSION,
                    ..before
                }
            );
            assert_eq!(info.compression().unwrap(), Compression::None);
            assert!(info.is_transactional() && !info.is_control());
            assert_eq!((info.span(), info.base_offset), (6, 1_000));
            assert_eq!((info.producer_id, info.producer_epoch, info.base_sequence), (7, 3, 40));
            let d = decode(&out, LIMIT).unwrap();
            assert!(d.records.is_empty());
            assert_eq!(d.info, info);
            // Produce refuses a batch without records; compaction's own output it accepts again.
            assert_eq!(validate(&out, LIMIT), Err(BatchError::Empty));
            assert_eq!(retain(&out, LIMIT, |_| panic!("no records to see")), Ok(Retained::Unchanged));
        }
    }

    #[test]
    fn control_batches_are_left_alone() {
        let marker = ControlMarker { kind: ControlKind::Commit, coordinator_epoch: 9, transaction: 0 };
        let bytes = marker.batch(42, 2, 5_000).unwrap();
        assert_eq!(
            retain(&bytes, LIMIT, |_| panic!("a control batch's records are not read")),
            Ok(Retained::Unchanged)
        );
    }

    #[test]
    fn encodings_another_writer_chose_are_copied_not_rewritten() {
        // Two records as Rill would never write them: record attributes 1 (Kafka ignores the
        // byte) and a timestamp delta of 0 as an overlong two-byte varint.
        let odd = |offset_delta: i32, key: u8| {
            let mut body = vec![0x01, 0x80, 0x00];
            put_varint(&mut body, offset_delta);
            put_varint(&mut body, 1);
            body.push(key);
            put_varint(&mut body, 1);
            body.push(b'v');
            put_varint(&mut body, 0);
            let mut record = Vec::new();
            put_varint(&mut record, body.len() as i32);
            record.extend(body);
            record
        };
        let (first, second) = (odd(0, b'x'), odd(3, b'y'));
        for c in ALL {
            let plain = [first.clone(), second.clone()].concat();
            let fields = BatchInfo {
                base_offset: 77,
                size: 0,
                partition_leader_epoch: 2,
                attributes: c.bits(),
                last_offset_delta: 3,
                base_timestamp: 500,
                max_timestamp: 500,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
                record_count: 2,
            };
            let batch = Bytes::from(header::write_batch(&fields, &c.compress(&plain).unwrap()).unwrap());
            let out = must_rewrite(&batch, |r| r.key == Some(b"y"));
            assert_eq!(encodings(&out), [Bytes::from(second.clone())], "{c:?}");
            let d = decode(&out, LIMIT).unwrap();
            assert_eq!((d.records[0].offset_delta, d.records[0].timestamp_ms), (3, 500));
            assert_eq!(d.info, BatchInfo { record_count: 1, size: out.len(), ..fields });
        }
    }

    #[test]
    fn damage_is_refused_not_blessed_with_a_fresh_crc() {
        let good = stored(Compression::None, records());
        let mut flipped = good.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(retain(&flipped.into(), LIMIT, |_| false), Err(BatchError::Checksum { .. })));
        assert!(matches!(retain(&good.slice(..60), LIMIT, |_| false), Err(BatchError::TooShort { .. })));
        // Over the limit: refused, as decode refuses it.
        let zstd = stored(Compression::Zstd, records());
        assert_eq!(retain(&zstd, 100, |_| false), Err(BatchError::TooLargeDecompressed { limit: 100 }));
    }

    /// A CRC-32C of each codec's rewrite of one fixed batch (records 0, 2 and 5 kept): pins the
    /// bytes replicas must agree on. A change here — a codec library upgraded, or built with
    /// another backend — changes what compaction writes; see [`Compression::compress`].
    #[test]
    fn rewrites_are_the_same_bytes_everywhere() {
        let expected: [(Compression, usize, u32); 5] = [
            (Compression::None, 397, 0x01f0acd9),
            (Compression::Gzip, 130, 0x97267f23),
            (Compression::Snappy, 136, 0xa155762b),
            (Compression::Lz4, 126, 0x1a901aae),
            (Compression::Zstd, 114, 0x6d817e87),
        ];
        let actual = expected.map(|(c, _, _)| {
            let original = stored(c, records());
            let out = must_rewrite(&original, |r| matches!(r.offset_delta, 0 | 2 | 5));
            assert_eq!(must_rewrite(&original, |r| matches!(r.offset_delta, 0 | 2 | 5)), out, "{c:?}: twice the same");
            (c, out.len(), crc32c::crc32c(&out))
        });
        assert_eq!(actual, expected);
    }

    fn arb_bytes(max: usize) -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from))
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        (
            any::<i64>(),
            // Few distinct keys, as a compacted topic has.
            proptest::option::of((0u8..4).prop_map(|k| Bytes::from(vec![b'k', k]))),
            arb_bytes(60),
            proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..6), arb_bytes(6))
                    .prop_map(|(k, v)| Header { key: Bytes::from(k), value: v }),
                0..3,
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

    /// A stored batch of any records in any codec, and two keep masks, one within the other.
    fn arb_case() -> impl Strategy<Value = (Bytes, Vec<bool>, Vec<bool>)> {
        (proptest::collection::vec(arb_record(), 1..24), 0i16..5, any::<bool>()).prop_flat_map(
            |(records, codec, transactional)| {
                let n = records.len();
                let c = Compression::from_bits(codec).unwrap();
                let mut b = BatchBuilder::new(c).producer(11, 1, 0).transactional(transactional);
                for r in records {
                    b.push(r).unwrap();
                }
                let batch = b.build().unwrap();
                (Just(batch), proptest::collection::vec(any::<bool>(), n), proptest::collection::vec(any::<bool>(), n))
                    .prop_map(|(batch, outer, inner)| {
                        let inner = outer.iter().zip(&inner).map(|(o, i)| *o && *i).collect();
                        (batch, outer, inner)
                    })
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn a_rewrite_decodes_to_the_original_filtered((batch, mask, _) in arb_case()) {
            let before = decode(&batch, LIMIT).unwrap();
            let result = retain(&batch, LIMIT, by_delta(&mask)).unwrap();
            prop_assert_eq!(result == Retained::Unchanged, mask.iter().all(|k| *k));
            let after = decode(&applied(&batch, &mask), LIMIT).unwrap();
            let expected: Vec<Record> =
                before.records.iter().filter(|r| mask[r.offset_delta as usize]).cloned().collect();
            prop_assert_eq!(&after.records, &expected);
            prop_assert_eq!(after.info.record_count as usize, expected.len());
            prop_assert_eq!(after.info.span(), before.info.span());
            let codec_bits = if expected.is_empty() { 0 } else { before.info.attributes & ATTR_COMPRESSION };
            prop_assert_eq!(
                after.info,
                BatchInfo {
                    size: after.info.size,
                    record_count: expected.len() as i32,
                    attributes: (before.info.attributes & !ATTR_COMPRESSION) | codec_bits,
                    ..before.info
                }
            );
        }

        #[test]
        fn retaining_the_same_records_again_changes_nothing((batch, mask, _) in arb_case()) {
            let once = applied(&batch, &mask);
            prop_assert_eq!(retain(&once, LIMIT, by_delta(&mask)), Ok(Retained::Unchanged));
        }

        #[test]
        fn retaining_in_two_steps_is_retaining_once((batch, outer, inner) in arb_case()) {
            let twice = applied(&applied(&batch, &outer), &inner);
            let once = applied(&batch, &inner);
            prop_assert_eq!(twice, once);
        }

        #[test]
        fn any_bytes_are_refused_or_rewritten_into_a_batch_that_decodes(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            fix in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let mut v = data;
            // Keep the length and CRC right so the record parser itself is exercised.
            if fix && v.len() >= BATCH_HEADER_LEN {
                let len = (v.len() - 12) as i32;
                v[8..12].copy_from_slice(&len.to_be_bytes());
                v[16] = 2;
                let crc = crc32c::crc32c(&v[21..]);
                v[17..21].copy_from_slice(&crc.to_be_bytes());
            }
            let bytes = Bytes::from(v);
            check_against_decode(&bytes, seed)?;
        }

        #[test]
        fn a_damaged_valid_batch_is_refused_or_rewritten_into_a_batch_that_decodes(
            (batch, _, _) in arb_case(),
            at in 0usize..2_000,
            byte in any::<u8>(),
            seed in any::<u64>(),
        ) {
            let mut v = batch.to_vec();
            let i = at % v.len();
            v[i] = byte;
            let crc = crc32c::crc32c(&v[21..]);
            v[17..21].copy_from_slice(&crc.to_be_bytes());
            check_against_decode(&Bytes::from(v), seed)?;
        }
    }

    /// `retain` accepts exactly what `decode` accepts (control batches aside, whose records it
    /// does not read), and what it writes decodes to the kept records.
    fn check_against_decode(bytes: &Bytes, seed: u64) -> Result<(), TestCaseError> {
        let limit = 1 << 16;
        let mut kept = Vec::new();
        let result = retain(bytes, limit, |r| {
            let keep = (seed >> (r.offset_delta as u32 % 64)) & 1 == 1;
            if keep {
                kept.push(r.offset_delta);
            }
            keep
        });
        let decoded = decode(bytes, limit);
        let control = BatchInfo::parse(bytes).is_ok_and(|i| i.is_control());
        if !control {
            prop_assert_eq!(result.as_ref().err(), decoded.as_ref().err());
        }
        if let (Ok(Retained::Rewritten(out)), Ok(d)) = (&result, &decoded) {
            let after = decode(out, limit).unwrap();
            let expected: Vec<Record> = d.records.iter().filter(|r| kept.contains(&r.offset_delta)).cloned().collect();
            prop_assert_eq!(after.records, expected);
            prop_assert_eq!(after.info.span(), d.info.span());
        }
        Ok(())
    }
}
