//! Record batches as a partition reads them on produce (`rill_records::validate`), a consumer
//! reads them on fetch (`rill_records::decode`) and compaction rewrites them
//! (`rill_records::retain`), under a decompression limit, in every codec.
//!
//! Input: one byte of mode (bits 0-3 pick the limit, 256 B to 1 MiB; bit 7 fixes the length and
//! CRC so the fuzzer gets past the checksum), then the batch. Which records `retain` keeps comes
//! from the batch's base offset field (bit `offsetDelta % 64`), which nothing else reads.
//!
//! Properties: no panic; what `validate` accepts `decode` reads, with the same header and offset
//! deltas 0, 1, 2, …; a decoded batch has exactly its declared count of records, at most one per
//! 7 bytes of its records within the limit, and re-encoding the records gives them back; `retain`
//! refuses what `decode` refuses (control batches aside, whose records it leaves unread), and
//! what it rewrites decodes under the same limit to the kept records, the span unchanged, and
//! comes back unchanged when retained again; the heap each call holds is bounded by a small
//! multiple of the limit (or, uncompressed, of the batch).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rill_fuzz::{fix_batch, limit_from, peak_during, Counting};
use rill_records::record::MIN_RECORD_BYTES;
use rill_records::{
    decode, retain, validate, BatchBuilder, BatchInfo, RecordView, Retained, TimestampType, BATCH_HEADER_LEN,
    MAX_DECOMPRESSED_BATCH_BYTES,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What a decompressor may hold besides its output: gzip's inflate state and window. (lz4
/// decompresses into the output itself, snappy checks each block's length first, and zstd's
/// state is C, outside this count.)
const CODEC_STATE_BYTES: usize = 256 << 10;
/// Heap per byte of decompressed records that decoding may hold: the output buffer (which may
/// double while it grows), plus a `Record` (104 bytes) per 7 bytes and a `Header` (64 bytes) per
/// 2 bytes of records at worst.
const DECODE_BYTES_PER_BYTE: usize = 36;
/// Validation collects nothing: only the output buffer.
const VALIDATE_BYTES_PER_BYTE: usize = 3;
/// A rewrite holds the decompressed records (whose buffer may double while it grows), a copy of
/// the kept ones, their compressed form and the new batch.
const RETAIN_BYTES_PER_BYTE: usize = 8;
/// What a compressor holds besides its output: miniz_oxide's deflate state (its dictionary,
/// hash chains and code buffer) is the largest, a few hundred KiB; lz4's frame encoder holds a
/// block and a hash table. (zstd's state is C, outside this count.)
const COMPRESSOR_STATE_BYTES: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let limit = limit_from(mode & 0x0f);
    let mut batch = rest.to_vec();
    if mode & 0x80 != 0 {
        fix_batch(&mut batch);
    }
    let bytes = Bytes::from(batch);

    let (validated, validate_peak) = peak_during(|| validate(&bytes, limit));
    let (decoded, decode_peak) = peak_during(|| decode(&bytes, limit));
    let mask = bytes.get(..8).map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or_default()));
    let keep = |r: &RecordView<'_>| (mask >> (r.offset_delta.rem_euclid(64))) & 1 == 1;
    let (retained, retain_peak) = peak_during(|| retain(&bytes, limit, keep));

    // The records region decompresses to at most the limit; uncompressed, it is a slice of the
    // batch and decoding copies none of it.
    let compressed = bytes.len() >= BATCH_HEADER_LEN && (i16::from_be_bytes([bytes[21], bytes[22]]) & 0x07) != 0;
    let plain_max = if compressed { limit } else { bytes.len() };
    let state = if compressed { CODEC_STATE_BYTES } else { 0 };
    assert!(
        validate_peak <= VALIDATE_BYTES_PER_BYTE * plain_max + state + 4096,
        "validate held {validate_peak} bytes for a batch of {} under a limit of {limit}",
        bytes.len()
    );
    assert!(
        decode_peak <= DECODE_BYTES_PER_BYTE * plain_max + state + 4096,
        "decode held {decode_peak} bytes for a batch of {} under a limit of {limit}",
        bytes.len()
    );
    assert!(
        retain_peak <= RETAIN_BYTES_PER_BYTE * plain_max + state + COMPRESSOR_STATE_BYTES + 4096,
        "retain held {retain_peak} bytes for a batch of {} under a limit of {limit}",
        bytes.len()
    );

    let control = BatchInfo::parse(&bytes).is_ok_and(|i| i.is_control());
    if !control {
        assert_eq!(retained.as_ref().err(), decoded.as_ref().err(), "retain and decode disagree on the batch");
    }
    if let (Ok(Retained::Rewritten(out)), Ok(d)) = (&retained, &decoded) {
        let after = match decode(out, limit) {
            Ok(after) => after,
            Err(e) => panic!("a rewritten batch does not decode: {e}"),
        };
        let kept: Vec<_> =
            d.records.iter().filter(|r| (mask >> r.offset_delta.rem_euclid(64)) & 1 == 1).cloned().collect();
        assert_eq!(after.records, kept, "a rewrite holds exactly the kept records");
        assert_eq!(after.info.span(), d.info.span());
        assert_eq!(after.info.last_offset_delta, d.info.last_offset_delta);
        assert_eq!(retain(out, limit, keep), Ok(Retained::Unchanged), "retaining again changes nothing");
    }

    if let Ok(info) = &validated {
        let d = match &decoded {
            Ok(d) => d,
            Err(e) => panic!("validate accepted a batch that decode refuses: {e}"),
        };
        assert_eq!(&d.info, info);
        for (i, r) in d.records.iter().enumerate() {
            assert_eq!(r.offset_delta as usize, i, "validate accepted offset deltas that are not dense");
        }
    }
    let Ok(d) = decoded else { return };
    assert_eq!(d.records.len(), d.info.record_count as usize);
    assert!(d.records.len() <= limit / MIN_RECORD_BYTES);
    let Ok(codec) = d.info.compression() else { panic!("decoded a batch of an unknown codec") };

    // Re-encoding what was read gives the same records (a builder numbers offsets densely and
    // writes create-time producer batches, so only those round-trip exactly).
    // (A batch of no records, as compaction leaves one, has nothing to re-encode.)
    let dense = !d.records.is_empty() && d.records.iter().enumerate().all(|(i, r)| r.offset_delta as usize == i);
    if dense && !d.info.is_control() && d.info.timestamp_type() == TimestampType::CreateTime {
        let mut b = BatchBuilder::new(codec)
            .producer(d.info.producer_id, d.info.producer_epoch, d.info.base_sequence)
            .transactional(d.info.is_transactional());
        for r in &d.records {
            b.push(r.clone()).expect("a decoded batch's records fit in a batch");
        }
        let again = b.build().expect("decoded records re-encode");
        // Timestamp deltas are taken from another base, so the records may take more bytes.
        let back = decode(&again, MAX_DECOMPRESSED_BATCH_BYTES).expect("a re-encoded batch decodes");
        assert_eq!(back.records, d.records);
        assert_eq!(back.info.compression().ok(), Some(codec));
        assert_eq!(
            (back.info.producer_id, back.info.producer_epoch, back.info.base_sequence),
            (d.info.producer_id, d.info.producer_epoch, d.info.base_sequence)
        );
        assert!(validate(&again, MAX_DECOMPRESSED_BATCH_BYTES).is_ok(), "a built batch validates");
    }
});
