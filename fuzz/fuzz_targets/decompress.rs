//! The decompressors (`Compression::decompress`) on their own: gzip, snappy (xerial framing and
//! raw blocks), lz4 frames, zstd frames and "none", under a limit.
//!
//! Input: one byte picking the codec (low 3 bits) and the limit (high bits), then the data.
//!
//! Properties: no panic; an output never passes the limit; the heap a call holds is a small
//! multiple of the limit plus the codec's own state; compressing the input and decompressing
//! it again gives it back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_fuzz::{limit_from, peak_during, Counting};
use rill_records::{BatchError, Compression};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What a decompressor may hold besides its output: gzip's inflate state and window. (lz4
/// decompresses into the output itself, snappy checks each block's length first, and zstd's
/// state is C, outside this count.)
const CODEC_STATE_BYTES: usize = 256 << 10;
/// The output buffer may double while it grows towards the limit.
const OUTPUT_BYTES_PER_BYTE: usize = 3;

const CODECS: [Compression; 5] =
    [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, input)) = data.split_first() else { return };
    let codec = CODECS[usize::from(mode & 0x07) % CODECS.len()];
    let limit = limit_from(mode >> 3);

    let (out, peak) = peak_during(|| codec.decompress(input, limit));
    match &out {
        Ok(plain) => assert!(plain.len() <= limit, "{codec:?}: {} bytes out under a limit of {limit}", plain.len()),
        Err(BatchError::TooLargeDecompressed { limit: l }) => assert_eq!(*l, limit),
        Err(BatchError::Decompression { .. }) => {}
        Err(e) => panic!("{codec:?}: unexpected error {e:?}"),
    }
    assert!(
        peak <= OUTPUT_BYTES_PER_BYTE * limit + CODEC_STATE_BYTES,
        "{codec:?} held {peak} bytes for {} bytes in under a limit of {limit}",
        input.len()
    );

    let packed = codec.compress(input).expect("compressing never fails");
    let back = codec.decompress(&packed, input.len()).expect("what was compressed decompresses");
    assert_eq!(back, input, "{codec:?} round trip");
    if !input.is_empty() {
        assert!(
            matches!(codec.decompress(&packed, input.len() - 1), Err(BatchError::TooLargeDecompressed { .. })),
            "{codec:?}: one byte over the limit is refused"
        );
    }
});
