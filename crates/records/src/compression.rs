//! The codecs Kafka clients send, with decompression bounded while it runs.
//!
//! * gzip: a gzip stream (several members are accepted, as Java's `GZIPInputStream` does).
//! * snappy: the xerial framing Kafka's Java client writes (`\x82SNAPPY\0`, versions, then
//!   length-prefixed snappy blocks); a raw snappy block is accepted too, as Java's reader does.
//! * lz4: the LZ4 frame format (Kafka's framing since KIP-57), 64 KiB independent blocks. Read
//!   block by block into the bounded output: a frame declares blocks of up to 4 MiB, and a
//!   decoder that sized its buffers by the declaration would let a few bytes cost megabytes.
//! * zstd: a zstd frame; the decoder's window is capped so a frame cannot make it allocate more
//!   than [`ZSTD_MAX_WINDOW_LOG`] allows.
//!
//! Every decompressor writes into a buffer that stops growing at the caller's limit: a batch
//! that decompresses to more is refused once the limit is passed, never first inflated.

use std::io::{Read, Write};

use crate::error::BatchError;

/// Kafka's codec numbers (the low three bits of a batch's attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Uncompressed.
    #[default]
    None,
    /// gzip.
    Gzip,
    /// Snappy (xerial framing).
    Snappy,
    /// LZ4 frames.
    Lz4,
    /// Zstandard.
    Zstd,
}

/// The largest zstd window (as a power of two) a frame may ask for: 16 MiB. Zstd's own default
/// limit is 128 MiB, which one hostile batch per request could make a node allocate.
pub const ZSTD_MAX_WINDOW_LOG: u32 = 24;
/// zstd compression level (Kafka's default, 3).
const ZSTD_LEVEL: i32 = 3;
/// gzip (deflate) compression level: zlib's default, 6, named rather than left to the backend's
/// idea of a default, since the level decides the bytes.
const GZIP_LEVEL: u32 = 6;
/// The gzip header's OS byte: 255, "unknown" — not the building machine's OS.
const GZIP_OS_UNKNOWN: u8 = 255;
/// Uncompressed bytes per xerial snappy block (the xerial default).
const SNAPPY_BLOCK: usize = 32 * 1024;
/// The xerial snappy stream header: magic, version 1, compatible version 1.
const XERIAL_HEADER: [u8; 16] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1];

impl Compression {
    /// The codec of attribute bits `bits` (already masked to the low three bits).
    pub fn from_bits(bits: i16) -> Result<Self, BatchError> {
        match bits {
            0 => Ok(Self::None),
            1 => Ok(Self::Gzip),
            2 => Ok(Self::Snappy),
            3 => Ok(Self::Lz4),
            4 => Ok(Self::Zstd),
            other => Err(BatchError::UnsupportedCompression(other)),
        }
    }

    /// The attribute bits of this codec.
    pub fn bits(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The codec's name, as Kafka's `compression.type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }

    /// Parses a `compression.type` name.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::None, Self::Gzip, Self::Snappy, Self::Lz4, Self::Zstd].into_iter().find(|c| c.name() == name)
    }

    /// Compresses `plain`.
    ///
    /// Deterministic: the same `plain` gives the same bytes on every call and every machine
    /// running the same build, because compaction ([`crate::compact`]) recompresses on each
    /// replica and replicas compare bytes. Every codec runs with fixed settings, on one thread,
    /// with nothing taken from the clock or the environment:
    ///
    /// * gzip: flate2 on its pure-Rust backend (miniz_oxide; no CPU-dependent code paths) at
    ///   level 6, the header's mtime 0 and OS byte 255. Enabling another flate2 backend anywhere
    ///   in the build (`zlib`, `zlib-ng`, `zlib-rs`, by feature unification) would change the
    ///   bytes, and zlib-ng's may then depend on the CPU it runs on.
    /// * snappy: the snap crate's raw encoder, pure Rust without CPU dispatch, in fixed 32 KiB
    ///   xerial blocks.
    /// * lz4: lz4_flex (pure Rust), a fixed frame layout: 64 KiB independent blocks, no
    ///   checksums, no content size. Its match finder hashes 5 bytes on 64-bit targets and 4 on
    ///   32-bit ones, so its output agrees across 64-bit little-endian machines (the ones Rill
    ///   servers run on) but not with a 32-bit build.
    /// * zstd: the zstd library (built from the source zstd-sys bundles, not a system
    ///   library) at level 3, single-threaded (the `zstdmt` feature is off, so no worker
    ///   threads whose count could change the frame), no checksum. zstd's choice of match finder
    ///   depends only on the parameters, not on the CPU.
    ///
    /// A new version of a codec library may compress differently: what a rewrite produces is
    /// fixed by `Cargo.lock`, and replicas running different builds can disagree on the bytes.
    /// The `compressed_bytes_are_pinned` test (and `compact`'s `rewrites_are_the_same_bytes_everywhere`)
    /// fails when an upgrade or a backend change alters them.
    pub fn compress(self, plain: &[u8]) -> Result<Vec<u8>, BatchError> {
        let fail = |e: std::io::Error| BatchError::Compression { codec: self.name(), reason: e.to_string() };
        match self {
            Self::None => Ok(plain.to_vec()),
            Self::Gzip => {
                let mut enc = flate2::GzBuilder::new()
                    .mtime(0)
                    .operating_system(GZIP_OS_UNKNOWN)
                    .write(Vec::with_capacity(plain.len() / 2), flate2::Compression::new(GZIP_LEVEL));
                enc.write_all(plain).map_err(fail)?;
                enc.finish().map_err(fail)
            }
            Self::Snappy => {
                let mut out = Vec::with_capacity(XERIAL_HEADER.len() + plain.len());
                out.extend_from_slice(&XERIAL_HEADER);
                let mut enc = snap::raw::Encoder::new();
                for chunk in plain.chunks(SNAPPY_BLOCK) {
                    let block = enc
                        .compress_vec(chunk)
                        .map_err(|e| BatchError::Compression { codec: "snappy", reason: e.to_string() })?;
                    let len = u32::try_from(block.len())
                        .map_err(|_| BatchError::Compression { codec: "snappy", reason: "block too large".into() })?;
                    out.extend_from_slice(&len.to_be_bytes());
                    out.extend_from_slice(&block);
                }
                Ok(out)
            }
            Self::Lz4 => {
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max64KB)
                    .block_mode(lz4_flex::frame::BlockMode::Independent)
                    .block_checksums(false)
                    .content_checksum(false)
                    .content_size(None);
                let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::with_capacity(plain.len()));
                enc.write_all(plain).map_err(fail)?;
                enc.finish().map_err(|e| BatchError::Compression { codec: "lz4", reason: e.to_string() })
            }
            Self::Zstd => zstd::bulk::compress(plain, ZSTD_LEVEL).map_err(fail),
        }
    }

    /// Decompresses `data`, refusing it once the output passes `limit` bytes.
    pub fn decompress(self, data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
        let fail = |e: std::io::Error| BatchError::Decompression { codec: self.name(), reason: e.to_string() };
        match self {
            Self::None => {
                if data.len() > limit {
                    return Err(BatchError::TooLargeDecompressed { limit });
                }
                Ok(data.to_vec())
            }
            Self::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(data), limit).map_err(|e| e.or(fail)),
            Self::Snappy => snappy_decompress(data, limit),
            Self::Lz4 => lz4_decompress(data, limit),
            Self::Zstd => {
                let mut dec = zstd::stream::read::Decoder::new(data).map_err(fail)?;
                dec.window_log_max(ZSTD_MAX_WINDOW_LOG).map_err(fail)?;
                read_bounded(dec, limit).map_err(|e| e.or(fail))
            }
        }
    }
}

/// Why a bounded read stopped: past the limit, or an I/O (decoding) error.
enum ReadError {
    TooLarge(usize),
    Io(std::io::Error),
}

impl ReadError {
    fn or(self, fail: impl Fn(std::io::Error) -> BatchError) -> BatchError {
        match self {
            Self::TooLarge(limit) => BatchError::TooLargeDecompressed { limit },
            Self::Io(e) => fail(e),
        }
    }
}

/// Reads `r` to its end into a buffer that may not pass `limit` bytes.
fn read_bounded(r: impl Read, limit: usize) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    r.take(cap).read_to_end(&mut out).map_err(ReadError::Io)?;
    if out.len() > limit {
        return Err(ReadError::TooLarge(limit));
    }
    Ok(out)
}

/// The LZ4 frame magic number (little-endian on the wire).
const LZ4_MAGIC: u32 = 0x184D_2204;
/// The legacy LZ4 format's magic: 8 MiB blocks, never written by Kafka clients.
const LZ4_LEGACY_MAGIC: u32 = 0x184C_2102;
/// How far back a linked LZ4 block may refer into the output before it.
const LZ4_WINDOW: usize = 64 * 1024;

/// LZ4 frames (one or more, concatenated), decompressed block by block straight into the output,
/// which never grows past `limit` (plus one byte, to tell "too large" apart): what a frame
/// declares (its block size, a block's length) is checked against the bytes present before
/// anything is allocated for it. Checksums are not verified (the batch's CRC covers these
/// bytes); content size and dictionary ids are not used (dictionaries are refused).
fn lz4_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let fail = |reason: String| BatchError::Decompression { codec: "lz4", reason };
    let mut out = Vec::new();
    let mut rest = data;
    // The next `n` bytes (at most 4), as a little-endian number.
    let take = |n: usize, rest: &mut &[u8], what: &str| -> Result<u32, BatchError> {
        let (head, tail) = rest.split_at_checked(n).ok_or_else(|| fail(format!("{what} truncated")))?;
        *rest = tail;
        Ok(head.iter().rev().fold(0u32, |v, b| (v << 8) | u32::from(*b)))
    };
    if rest.is_empty() {
        return Err(fail("no frame".into()));
    }
    while !rest.is_empty() {
        match take(4, &mut rest, "frame magic")? {
            LZ4_MAGIC => {}
            LZ4_LEGACY_MAGIC => return Err(fail("legacy LZ4 format (Kafka writes the LZ4 frame format)".into())),
            other => return Err(fail(format!("not an LZ4 frame (magic {other:#010x})"))),
        }
        let flags = take(1, &mut rest, "frame descriptor")?;
        let bd = take(1, &mut rest, "frame descriptor")?;
        if flags >> 6 != 1 {
            return Err(fail(format!("unsupported LZ4 frame version {}", flags >> 6)));
        }
        if flags & 0x01 != 0 {
            return Err(fail("LZ4 dictionaries are not supported".into()));
        }
        let independent = flags & 0x20 != 0;
        let block_checksums = flags & 0x10 != 0;
        let content_checksum = flags & 0x04 != 0;
        let max_block: usize = match (bd >> 4) & 0x07 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            other => return Err(fail(format!("reserved LZ4 block size {other}"))),
        };
        // The content size (8 bytes) when declared, then the header checksum.
        if flags & 0x08 != 0 {
            take(4, &mut rest, "content size")?;
            take(4, &mut rest, "content size")?;
        }
        take(1, &mut rest, "header checksum")?;
        loop {
            let word = take(4, &mut rest, "block length")?;
            if word == 0 {
                break;
            }
            let len = (word & 0x7fff_ffff) as usize;
            if len > max_block {
                return Err(fail(format!("a block of {len} bytes in a frame of {max_block}-byte blocks")));
            }
            let (block, tail) =
                rest.split_at_checked(len).ok_or_else(|| fail(format!("block of {len} bytes truncated")))?;
            rest = tail;
            if block_checksums {
                take(4, &mut rest, "block checksum")?;
            }
            let start = out.len();
            // Room for the whole block, or up to one byte past the limit if that is less.
            let room = max_block.min(limit.saturating_add(1).saturating_sub(start));
            if word & 0x8000_0000 != 0 {
                if start.saturating_add(len) > limit {
                    return Err(BatchError::TooLargeDecompressed { limit });
                }
                out.extend_from_slice(block);
                continue;
            }
            out.resize(start + room, 0);
            let (before, after) = out.split_at_mut(start);
            let dict = if independent { &[][..] } else { &before[before.len().saturating_sub(LZ4_WINDOW)..] };
            let written = match lz4_flex::block::decompress_into_with_dict(block, after, dict) {
                Ok(n) => n,
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if room < max_block => {
                    return Err(BatchError::TooLargeDecompressed { limit });
                }
                Err(e) => return Err(fail(e.to_string())),
            };
            out.truncate(start + written);
            if out.len() > limit {
                return Err(BatchError::TooLargeDecompressed { limit });
            }
        }
        if content_checksum {
            take(4, &mut rest, "content checksum")?;
        }
    }
    Ok(out)
}

/// Snappy: xerial-framed blocks, or one raw block. Each block's decompressed length is read
/// from its preamble and checked against what is left of `limit` before it is decompressed.
fn snappy_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let fail = |reason: String| BatchError::Decompression { codec: "snappy", reason };
    let mut dec = snap::raw::Decoder::new();
    let mut out = Vec::new();
    let mut block = |compressed: &[u8], out: &mut Vec<u8>| -> Result<(), BatchError> {
        let n = snap::raw::decompress_len(compressed).map_err(|e| fail(e.to_string()))?;
        if out.len().saturating_add(n) > limit {
            return Err(BatchError::TooLargeDecompressed { limit });
        }
        let start = out.len();
        out.resize(start + n, 0);
        let written = dec.decompress(compressed, &mut out[start..]).map_err(|e| fail(e.to_string()))?;
        out.truncate(start + written);
        Ok(())
    };
    let Some(mut rest) = data.strip_prefix(&XERIAL_HEADER[..8]) else {
        block(data, &mut out)?;
        return Ok(out);
    };
    // Versions (two big-endian i32s), then `length ‖ block` until the end.
    rest = rest.get(8..).ok_or_else(|| fail("xerial header truncated".into()))?;
    while !rest.is_empty() {
        let len_bytes: [u8; 4] =
            rest.get(..4).and_then(|b| b.try_into().ok()).ok_or_else(|| fail("block length truncated".into()))?;
        let len = u32::from_be_bytes(len_bytes) as usize;
        let compressed = rest.get(4..4 + len).ok_or_else(|| fail(format!("block of {len} bytes truncated")))?;
        block(compressed, &mut out)?;
        rest = &rest[4 + len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    #[test]
    fn every_codec_round_trips() {
        let plain: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for c in ALL {
            let packed = c.compress(&plain).unwrap();
            assert_eq!(c.decompress(&packed, plain.len()).unwrap(), plain, "{c:?}");
            assert_eq!(Compression::from_bits(c.bits()).unwrap(), c);
            assert_eq!(Compression::parse(c.name()), Some(c));
        }
        assert!(Compression::from_bits(5).is_err());
    }

    /// The length and CRC-32C of each codec's output for one fixed input. Replicas compare
    /// compacted batches byte for byte, so compression must not vary between runs, machines or
    /// threads; a failure here means a codec library or its settings changed what it writes.
    #[test]
    fn compressed_bytes_are_pinned() {
        // Compressible with some variety: text-like runs, then pseudo-random bytes.
        let mut plain: Vec<u8> =
            (0..150_000u32).map(|i| b"the quick brown fox "[(i % 20) as usize] ^ (i / 997) as u8).collect();
        plain.extend((0..50_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        let expected: [(Compression, usize, u32); 5] = [
            (Compression::None, 200000, 0x13ad4a0f),
            (Compression::Gzip, 5972, 0x9d492222),
            (Compression::Snappy, 18785, 0xb57158c7),
            (Compression::Lz4, 10299, 0x0755be58),
            (Compression::Zstd, 9254, 0xae34a266),
        ];
        let actual = expected.map(|(c, _, _)| {
            let packed = c.compress(&plain).unwrap();
            assert_eq!(c.compress(&plain).unwrap(), packed, "{c:?}: twice the same");
            (c, packed.len(), crc32c::crc32c(&packed))
        });
        assert_eq!(actual, expected);
    }

    #[test]
    fn decompression_stops_at_the_limit() {
        // A bomb: 64 MiB of zeros compress to very little in every codec.
        let zeros = vec![0u8; 64 << 20];
        for c in ALL {
            let packed = c.compress(&zeros).unwrap();
            if c != Compression::None {
                assert!(packed.len() < 4 << 20, "{c:?} packs zeros well: {}", packed.len());
            }
            let err = c.decompress(&packed, 1 << 20).unwrap_err();
            assert_eq!(err, BatchError::TooLargeDecompressed { limit: 1 << 20 }, "{c:?}");
        }
    }

    #[test]
    fn raw_snappy_is_read_and_garbage_is_refused() {
        let raw = snap::raw::Encoder::new().compress_vec(b"hello raw snappy").unwrap();
        assert_eq!(Compression::Snappy.decompress(&raw, 100).unwrap(), b"hello raw snappy");
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            assert!(c.decompress(b"definitely not compressed data", 1000).is_err(), "{c:?}");
        }
        // A snappy preamble declaring a huge length is refused before anything is allocated.
        let lying = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(matches!(
            Compression::Snappy.decompress(&lying, 1 << 20),
            Err(BatchError::TooLargeDecompressed { .. } | BatchError::Decompression { .. })
        ));
    }

    fn lz4_frame(plain: &[u8], info: lz4_flex::frame::FrameInfo) -> Vec<u8> {
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(plain).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn lz4_reads_every_frame_layout_another_writer_may_choose() {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameInfo};
        // Compressible across blocks (so linked blocks refer back into earlier ones), with an
        // incompressible stretch (stored as uncompressed blocks).
        let mut plain: Vec<u8> = (0..300_000u32).map(|i| (i % 1_000) as u8 ^ (i / 7_000) as u8).collect();
        plain.extend((0..70_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        for size in [BlockSize::Max64KB, BlockSize::Max256KB, BlockSize::Max1MB, BlockSize::Max4MB] {
            for mode in [BlockMode::Independent, BlockMode::Linked] {
                let info = FrameInfo::new()
                    .block_size(size)
                    .block_mode(mode)
                    .block_checksums(mode == BlockMode::Linked)
                    .content_checksum(true)
                    .content_size(Some(plain.len() as u64));
                let frame = lz4_frame(&plain, info);
                assert_eq!(Compression::Lz4.decompress(&frame, plain.len()).unwrap(), plain, "{size:?} {mode:?}");
                assert_eq!(
                    Compression::Lz4.decompress(&frame, plain.len() - 1),
                    Err(BatchError::TooLargeDecompressed { limit: plain.len() - 1 }),
                    "{size:?} {mode:?}"
                );
            }
        }
        // Two frames back to back are read as one stream, as Java's reader does.
        let mut two = lz4_frame(b"first ", FrameInfo::new());
        two.extend(lz4_frame(b"second", FrameInfo::new()));
        assert_eq!(Compression::Lz4.decompress(&two, 100).unwrap(), b"first second");
    }

    #[test]
    fn a_few_lz4_bytes_cannot_claim_megabytes() {
        // Found by the record_batch fuzz target: a 14-byte legacy LZ4 frame (8 MiB blocks) made
        // the frame decoder allocate 16 MiB under a limit of 8 KiB. (The targets measure what a
        // decompression allocates; here only the answers are checked.)
        let legacy = [0x02, 0x21, 0x4c, 0x18, 0x14, 0x00, 0x01, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
        assert!(matches!(Compression::Lz4.decompress(&legacy, 8 << 10), Err(BatchError::Decompression { .. })));
        // A frame of 4 MiB blocks whose one block holds 4 MiB of zeros: refused at the limit,
        // which bounds the output buffer, not at the block size the frame declares.
        let info = lz4_flex::frame::FrameInfo::new().block_size(lz4_flex::frame::BlockSize::Max4MB);
        let zeros = lz4_frame(&vec![0u8; 4 << 20], info.clone());
        assert!(zeros.len() < 32 << 10, "{}", zeros.len());
        assert_eq!(
            Compression::Lz4.decompress(&zeros, 8 << 10),
            Err(BatchError::TooLargeDecompressed { limit: 8 << 10 })
        );
        // A block declaring more bytes than the data holds is refused before any is read.
        let mut short = lz4_frame(b"hello", lz4_flex::frame::FrameInfo::new());
        short.truncate(short.len() - 6);
        assert!(matches!(Compression::Lz4.decompress(&short, 100), Err(BatchError::Decompression { .. })));
        let mut huge = lz4_frame(b"", info);
        huge.splice(huge.len() - 4.., 0x003f_ffffu32.to_le_bytes());
        assert!(matches!(Compression::Lz4.decompress(&huge, 100), Err(BatchError::Decompression { .. })));
        for junk in [&b""[..], b"\x04\x22\x4d\x18", b"\x04\x22\x4d\x18\x41\x40\x00"] {
            assert!(Compression::Lz4.decompress(junk, 100).is_err());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_bytes_round_trip_in_every_codec(plain in proptest::collection::vec(any::<u8>(), 0..3_000), repeat in 1usize..40) {
            // Repeated, so the compressors find matches.
            let plain: Vec<u8> = plain.iter().copied().cycle().take(plain.len() * repeat).collect();
            for c in ALL {
                let packed = c.compress(&plain).unwrap();
                prop_assert_eq!(&c.decompress(&packed, plain.len()).unwrap(), &plain);
                if !plain.is_empty() {
                    prop_assert_eq!(
                        c.decompress(&packed, plain.len() - 1),
                        Err(BatchError::TooLargeDecompressed { limit: plain.len() - 1 })
                    );
                }
            }
        }

        #[test]
        fn any_bytes_decompress_within_the_limit_or_are_refused(data in proptest::collection::vec(any::<u8>(), 0..400), limit in 0usize..2_000) {
            for c in ALL {
                if let Ok(out) = c.decompress(&data, limit) {
                    prop_assert!(out.len() <= limit);
                }
            }
        }
    }
}
