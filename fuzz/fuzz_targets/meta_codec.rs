//! The metadata codec (`rill_meta::codec`): group 0's snapshot (`MetaState`), its commands (log
//! entries, also what `Cluster.ProposeMeta` carries from node to node) and their results; and
//! the state machine applying decoded commands.
//!
//! Input: the bytes, given to every decoder.
//!
//! Properties: no panic; what decodes re-encodes to the same value; a decoded command applied
//! to a small cluster's metadata is deterministic, and the state it leaves round-trips too; the
//! heap a decode holds is a small multiple of its input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rill_fuzz::{base_cluster, peak_during, Counting};
use rill_meta::codec::{decode_command, decode_result, decode_state, encode_command, encode_result, encode_state};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap a decode may hold per input byte: prost's message plus the converted value (a map node
/// per topic or node), for as little as two bytes per repeated element. The worst case is an
/// input of empty topic entries (two bytes each) just past a doubling of prost's
/// `Vec<pb::Topic>`: for 2^k + 1 entries the old buffer of 2^k elements and the new one of
/// 2^(k+1) are both held while it moves, 3 × 2^k elements of about 300 bytes (`pb::Topic` with
/// its inline `pb::TopicConfig`) for about 2 × 2^k input bytes — about 450 bytes per byte. A
/// 266-byte input of 133 such entries held 118,754 bytes.
const BYTES_PER_INPUT_BYTE: usize = 512;
/// Fixed overhead.
const SLACK_BYTES: usize = 16 << 10;

fn bounded(what: &str, peak: usize, len: usize) {
    assert!(peak <= BYTES_PER_INPUT_BYTE * len + SLACK_BYTES, "{what} held {peak} bytes decoding {len} bytes");
}

fuzz_target!(|data: &[u8]| {
    let (state, peak) = peak_during(|| decode_state(data));
    bounded("decode_state", peak, data.len());
    if let Ok(s) = state {
        assert_eq!(decode_state(&encode_state(&s)).as_ref(), Ok(&s), "state round trip");
    }

    let (result, peak) = peak_during(|| decode_result(data));
    bounded("decode_result", peak, data.len());
    if let Ok(r) = result {
        assert_eq!(decode_result(&encode_result(&r)).as_ref(), Ok(&r), "result round trip");
    }

    let (command, peak) = peak_during(|| decode_command(data));
    bounded("decode_command", peak, data.len());
    let Ok(cmd) = command else { return };
    assert_eq!(decode_command(&encode_command(&cmd)).as_ref(), Ok(&cmd), "command round trip");

    let base = base_cluster();
    let (mut a, mut b) = (base.clone(), base);
    let result = a.apply(cmd.clone());
    assert_eq!(b.apply(cmd), result, "apply is deterministic");
    assert_eq!(a, b);
    assert_eq!(decode_state(&encode_state(&a)).as_ref(), Ok(&a), "the state after a command round-trips");
    assert_eq!(decode_result(&encode_result(&result)).as_ref(), Ok(&result), "its result round-trips");
});
