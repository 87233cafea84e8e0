//! The Raft codec (`rill_raft::codec`): every message between nodes (append-entries, vote and
//! install-snapshot requests and answers, as `RaftMessage` payloads and inside a heartbeat
//! `RaftBatch`) and every stored value (log entries, votes, log ids, the purge point).
//!
//! Input: the bytes, given to every decoder.
//!
//! Properties: no panic; what decodes re-encodes to something that decodes to the same value;
//! the heap a decode holds is a small multiple of its input.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use prost::Message;
use rill_fuzz::{peak_during, Counting};
use rill_proto::internal as pb;
use rill_raft::codec::{decode_entry, encode_entry, Purged, Wire};
use rill_raft::types::{LogId, Vote};
use rill_raft::{NodeId, TypeConfig};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap a decoder may hold per input byte: a repeated field costs its decoded element (an
/// entry, a node set, a map node) for as little as two bytes on the wire, converted once more
/// into openraft's types.
const BYTES_PER_INPUT_BYTE: usize = 256;
/// Fixed overhead (an error message, a small map's first node).
const SLACK_BYTES: usize = 16 << 10;

type AppendAnswer = Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>;
type VoteAnswer = Result<VoteResponse<NodeId>, RaftError<NodeId>>;
type SnapshotAnswer = Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>;

/// Decodes `bytes` as `T` under the heap bound, and checks the re-encoding round trip.
fn check<T: Wire + PartialEq + std::fmt::Debug>(bytes: &Bytes) {
    let (decoded, peak) = peak_during(|| T::decode(bytes.clone()));
    assert!(
        peak <= BYTES_PER_INPUT_BYTE * bytes.len() + SLACK_BYTES,
        "{} held {peak} bytes decoding {} bytes",
        std::any::type_name::<T>(),
        bytes.len()
    );
    if let Ok(v) = decoded {
        assert_eq!(T::decode(v.encode()).as_ref(), Ok(&v), "{} round trip", std::any::type_name::<T>());
    }
}

/// Openraft's requests have no `PartialEq`: compared by their fields.
fn check_append(bytes: &Bytes) {
    let (decoded, peak) = peak_during(|| AppendEntriesRequest::<TypeConfig>::decode(bytes.clone()));
    assert!(peak <= BYTES_PER_INPUT_BYTE * bytes.len() + SLACK_BYTES, "append-entries held {peak} bytes");
    if let Ok(r) = decoded {
        let back = AppendEntriesRequest::<TypeConfig>::decode(r.encode()).expect("a re-encoded request decodes");
        assert_eq!((back.vote, back.prev_log_id, back.leader_commit), (r.vote, r.prev_log_id, r.leader_commit));
        assert_eq!(back.entries, r.entries);
    }
}

fn check_snapshot(bytes: &Bytes) {
    let (decoded, peak) = peak_during(|| InstallSnapshotRequest::<TypeConfig>::decode(bytes.clone()));
    assert!(peak <= BYTES_PER_INPUT_BYTE * bytes.len() + SLACK_BYTES, "install-snapshot held {peak} bytes");
    if let Ok(r) = decoded {
        let back = InstallSnapshotRequest::<TypeConfig>::decode(r.encode()).expect("a re-encoded request decodes");
        assert_eq!(
            (back.vote, &back.meta, back.offset, &back.data, back.done),
            (r.vote, &r.meta, r.offset, &r.data, r.done)
        );
    }
}

fn check_entry(bytes: &Bytes) {
    let (decoded, peak) = peak_during(|| decode_entry(bytes.clone()));
    assert!(peak <= BYTES_PER_INPUT_BYTE * bytes.len() + SLACK_BYTES, "a stored entry held {peak} bytes");
    if let Ok(e) = decoded {
        let again = encode_entry(e.base, &e.entry).expect("a decoded entry re-encodes");
        let back = decode_entry(again).expect("a re-encoded entry decodes");
        assert_eq!((back.base, back.units(), &back.entry), (e.base, e.units(), &e.entry));
    }
}

/// Every decoder a node runs on what another node sent or on what it stored.
fn all(bytes: &Bytes) {
    check_append(bytes);
    check::<AppendAnswer>(bytes);
    check::<VoteRequest<NodeId>>(bytes);
    check::<VoteAnswer>(bytes);
    check_snapshot(bytes);
    check::<SnapshotAnswer>(bytes);
    check::<Vote>(bytes);
    check::<LogId>(bytes);
    check::<Purged>(bytes);
    check_entry(bytes);
}

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    all(&bytes);
    // The envelopes: one message, or a batch of heartbeats for many groups.
    if let Ok(m) = pb::RaftMessage::decode(bytes.clone()) {
        all(&m.payload);
    }
    if let Ok(batch) = pb::RaftBatch::decode(bytes) {
        for m in batch.messages.iter().take(8) {
            all(&m.payload);
        }
    }
});
