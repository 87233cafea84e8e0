//! Request frames as the Kafka listener reads them (`rill_server::kafka::dispatch::parse`): the
//! header, the version against the supported ranges, the body through the `kafka-protocol`
//! crate's decoders (Rill's patched copy).
//!
//! Input: one request frame without its length (the listener checks the length against
//! `[kafka] max-request-bytes` before reading the frame, so the frame is what arrives). Half the
//! inputs get a supported API key and version written over their first four bytes, so the
//! decoders are reached rather than the "unknown API" refusal.
//!
//! Properties: no panic and no abort (the unpatched crate aborts on an array count of 2^31); a
//! frame is a request, an answer (KIP-511) or a refusal; the heap the decode holds is at most
//! 64 × the frame plus 64 KiB (a decoded element is at most a few dozen times its smallest
//! encoding: a 1-byte compact string becomes a 32-byte `StrBytes` inside a struct).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rill_fuzz::{peak_during, Counting};
use rill_server::kafka::dispatch::{parse, Parsed};
use rill_server::kafka::versions::SUPPORTED;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let mut frame = data.to_vec();
    if let [mode, rest @ ..] = data {
        if mode & 1 == 1 && rest.len() >= 4 {
            // A supported API at a version in (or just past) its range.
            let s = SUPPORTED[usize::from(mode >> 1) % SUPPORTED.len()];
            let span = (s.max - s.min + 2) as u16;
            let version = s.min + (u16::from(rest[2]) % span) as i16;
            frame = rest.to_vec();
            frame[0..2].copy_from_slice(&(s.api as i16).to_be_bytes());
            frame[2..4].copy_from_slice(&version.to_be_bytes());
        }
    }
    let len = frame.len();
    let (parsed, peak) = peak_during(|| parse(Bytes::from(frame)));
    assert!(peak <= 64 * len + (64 << 10), "decoding a {len}-byte frame held {peak} bytes");
    match parsed {
        Ok(Parsed::Request { header, version, .. }) => {
            let supported = SUPPORTED.iter().find(|s| s.api as i16 == header.request_api_key);
            let s = supported.expect("a decoded request is of a supported API");
            assert!((s.min..=s.max).contains(&version));
        }
        Ok(Parsed::Answered(answer)) => assert!(answer.len() >= 8, "an answer frame has a header"),
        Err(_) => {}
    }
});
