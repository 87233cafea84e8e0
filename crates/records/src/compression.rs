//! The codecs Kafka clients send, with decompression bounded while it runs.
//!
//! * gzip: a gzip stream (several members are accepted, as Java's `GZIPInputStream` does).
//! * snappy: the xerial framing Kafka's Java client writes (`\x82SNAPPY\0`, versions, then
//!   length-prefixed snappy blocks); a raw snappy block is accepted too, as Java's reader does.
//! * lz4: the LZ4 frame format (Kafka's framing since KIP-57), 64 KiB independent blocks.
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
    pub fn compress(self, plain: &[u8]) -> Result<Vec<u8>, BatchError> {
        let fail = |e: std::io::Error| BatchError::Compression { codec: self.name(), reason: e.to_string() };
        match self {
            Self::None => Ok(plain.to_vec()),
            Self::Gzip => {
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::with_capacity(plain.len() / 2), flate2::Compression::default());
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
                    .block_mode(lz4_flex::frame::BlockMode::Independent);
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
            Self::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), limit).map_err(|e| e.or(fail)),
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
}
